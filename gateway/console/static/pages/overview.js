import { bytes, el, fill, get, link, path, rate, start, table } from "../console.js";

function figure(label, value) {
  return el("div", { class: "figure" }, label, el("b", {}, value));
}

start(async () => {
  const o = await get("/v1/overview");
  const alive = o.brokers.filter((b) => b.alive).length;
  fill(
    "figures",
    figure("brokers alive", `${alive} of ${o.brokers.length}`),
    figure("sends", rate(o.send_rate)),
    figure("receives", rate(o.receive_rate)),
    figure("topics", o.topics),
    figure("groups", o.groups),
  );
  fill(
    "brokers",
    table(
      [
        ["broker", (b) => b.name],
        ["id", (b) => b.broker_id],
        ["address", (b) => b.address],
        ["role", (b) => (b.alive ? b.role : el("span", { class: "dead" }, `${b.role}, not answering`))],
        ["epoch", (b) => b.epoch ?? ""],
        ["replication lag", (b) => (b.replication_lag_bytes === null ? "" : bytes(b.replication_lag_bytes))],
        ["disk used", (b) => (b.disk ? `${bytes(b.disk.used_bytes)} of ${bytes(b.disk.total_bytes)}` : "")],
        ["sends", (b) => rate(b.send_rate)],
        ["receives", (b) => rate(b.receive_rate)],
      ],
      o.brokers,
      "no broker is registered",
    ),
  );
  fill(
    "busiest",
    table(
      [
        ["topic", (t) => link(path`/console/topics?topic=${t.topic}`, t.topic)],
        ["sends", (t) => rate(t.send_rate)],
        ["messages", (t) => t.messages],
      ],
      o.busiest_topics,
      "no topic yet",
    ),
  );
  fill(
    "behind",
    table(
      [
        ["group", (g) => link(path`/console/groups?group=${g.group}`, g.group)],
        ["lag", (g) => g.lag],
        ["by topic", (g) => g.topics.map((t) => `${t.topic}: ${t.lag}`).join(", ")],
      ],
      o.groups_behind,
      "no group is behind",
    ),
  );
});
