import uPlot from "../vendor/uplot-1.6.32/uPlot.esm.js";
import { api, el, fill, get, link, notice, onSubmit, param, path, showProblem, start, table } from "../console.js";

let chart = null;

function figure(label, value, id) {
  return el("div", { class: "figure" }, label, el("b", id ? { id } : {}, value));
}

function drawLag(history) {
  const times = [...new Set(history.series.flatMap((s) => s.samples.map((p) => Date.parse(p.at) / 1000)))].sort((a, b) => a - b);
  const data = [times];
  const series = [{}];
  const colours = ["#1f5f8b", "#c0392b", "#2e8b57", "#8e44ad", "#d35400", "#7f8c8d"];
  history.series.forEach((s, i) => {
    const at = new Map(s.samples.map((p) => [Date.parse(p.at) / 1000, p.lag]));
    data.push(times.map((t) => at.get(t) ?? null));
    series.push({ label: s.topic, stroke: colours[i % colours.length], width: 2 });
  });
  const box = document.getElementById("lag-chart");
  if (chart) chart.destroy();
  box.replaceChildren();
  box.dataset.samples = String(times.length);
  box.dataset.peak = String(Math.max(0, ...data.slice(1).flat().filter((v) => v !== null)));
  box.dataset.last = JSON.stringify(data.slice(1).map((ys) => ys[ys.length - 1] ?? null));
  if (!times.length) {
    box.append(el("p", { class: "empty" }, "no sample yet"));
    chart = null;
    return;
  }
  const opts = { width: Math.min(900, window.innerWidth - 60), height: 260, series, scales: { y: { range: (u, min, max) => [0, Math.max(1, max)] } } };
  chart = new uPlot(opts, data, box);
}

async function showGroup(group) {
  document.getElementById("group").hidden = false;
  document.getElementById("pick-group").elements.group.value = group;
  fill("group-name", `Group ${group} `, link(path`/console/dlq?group=${group}`, "dead letters"));
  const lag = await get(path`/v1/groups/${group}/lag`);
  const retrying = lag.queues.filter((q) => q.retry).reduce((n, q) => n + q.lag, 0);
  let dead = "";
  try {
    const dlq = await get(path`/v1/groups/${group}/dlq?max=1`);
    dead = dlq.queues.reduce((n, q) => n + (q.max_offset - q.min_offset), 0);
  } catch (error) {
    showProblem(error, "dead letters");
  }
  fill(
    "group-figures",
    figure("lag", lag.total_lag, "total-lag"),
    figure("in flight", lag.total_in_flight),
    figure("retrying", retrying),
    figure("dead letters", dead),
  );
  fill(
    "lag",
    table(
      [
        ["topic", (q) => (q.retry ? `${q.topic} (retries)` : link(path`/console/topics?topic=${q.topic}`, q.topic))],
        ["broker", (q) => q.broker],
        ["queue", (q) => q.queue_id],
        ["broker offset", (q) => q.broker_offset],
        ["consumer offset", (q) => q.consumer_offset],
        ["lag", (q) => q.lag],
        ["in flight", (q) => q.in_flight],
      ],
      lag.queues,
      "the group has consumed nothing yet",
    ),
  );
  drawLag(await get(path`/v1/groups/${group}/lag/history`));
}

async function load() {
  const list = await get("/v1/groups");
  fill(
    "groups",
    table(
      [
        ["group", (g) => link(path`/console/groups?group=${g.name}`, g.name)],
        ["topics", (g) => g.subscriptions.map((s) => s.topic).join(", ")],
        ["max retries", (g) => g.max_retries],
        ["fifo", (g) => (g.fifo ? "yes" : "no")],
        ["broadcast", (g) => (g.broadcast ? "yes" : "no")],
      ],
      list.groups,
      "no group yet",
    ),
  );
  if (param("group")) await showGroup(param("group"));
}

document.getElementById("pick-group").addEventListener("submit", (event) => {
  event.preventDefault();
  location.search = `?group=${encodeURIComponent(event.target.elements.group.value)}`;
});

onSubmit("reset", async (data) => {
  const body = {};
  if (data.offset !== "") body.offset = Number(data.offset);
  else if (data.timestamp !== "") body.timestamp = /^\d+$/.test(data.timestamp) ? Number(data.timestamp) : data.timestamp;
  const group = param("group");
  const reset = await api("POST", path`/v1/groups/${group}/topics/${data.topic}/offsets:reset`, body);
  notice(`reset ${reset.queues.length} queues of ${reset.topic} for ${reset.group}`);
  await showGroup(group);
});

start(load);
