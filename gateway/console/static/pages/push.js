import { api, el, fill, get, notice, path, showProblem, start, table } from "../console.js";

async function act(sub, verb) {
  try {
    await api("POST", path`/v1/groups/${sub.group}/subscriptions/${sub.topic}` + `:${verb}`);
    notice(`${verb}d ${sub.group} → ${sub.topic}`);
    await load();
  } catch (error) {
    showProblem(error, verb);
  }
}

async function load() {
  const { subscriptions } = await get("/v1/subscriptions");
  fill(
    "subscriptions",
    table(
      [
        ["group", (s) => s.group],
        ["topic", (s) => s.topic],
        ["endpoint", (s) => s.endpoint_url],
        ["state", (s) => (s.status.state === "active" ? s.status.state : el("span", { class: "dead" }, s.status.state))],
        ["in flight", (s) => `${s.status.in_flight} of ${s.status.window}`],
        ["per second", (s) => s.status.deliveries_per_second.toFixed(1)],
        ["acked", (s) => s.status.acked],
        ["failed", (s) => s.status.failed],
        ["last error", (s) => (s.status.last_errors.length ? s.status.last_errors[s.status.last_errors.length - 1].error : "")],
        ["", (s) => el("button", { type: "button", onclick: () => act(s, s.paused ? "resume" : "pause") }, s.paused ? "Resume" : "Pause")],
      ],
      subscriptions,
      "no push subscription",
    ),
  );
}

start(load);
