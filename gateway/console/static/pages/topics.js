import { api, el, fill, get, link, notice, onSubmit, param, path, start, table } from "../console.js";

async function showTopic(name) {
  // One call: a key that may read the topic gets each queue's offsets with it.
  const topic = await get(path`/v1/topics/${name}`);
  const rows = topic.brokers.flatMap((broker) =>
    broker.queues.map((queue) => ({ broker: broker.broker, queue, available: broker.available })),
  );
  const form = document.getElementById("put-topic");
  form.elements.topic.value = name;
  fill(
    "topic",
    el("h2", {}, `${topic.topic}: ${topic.message_type}, ${topic.queues} queues `, link(path`/console/messages?peek=${name}`, "peek")),
    table(
      [
        ["broker", (r) => (r.available ? r.broker : el("span", { class: "dead" }, `${r.broker} (not answering)`))],
        ["queue", (r) => r.queue.queue_id],
        ["readable", (r) => (r.queue.readable ? "yes" : "no")],
        ["writable", (r) => (r.queue.writable ? "yes" : "no")],
        ["min offset", (r) => r.queue.min_offset ?? ""],
        ["max offset", (r) => r.queue.max_offset ?? ""],
        ["messages", (r) => (r.queue.min_offset !== undefined ? r.queue.max_offset - r.queue.min_offset : "")],
      ],
      rows,
    ),
  );
}

async function load() {
  const [list] = await Promise.all([get("/v1/topics"), param("topic") ? showTopic(param("topic")) : null]);
  fill(
    "topics",
    table(
      [
        ["topic", (t) => link(path`/console/topics?topic=${t.topic}`, t.topic)],
        ["type", (t) => t.message_type],
        ["queues", (t) => t.queues],
        ["brokers", (t) => t.brokers.join(", ")],
      ],
      list.topics,
      "no topic yet: create one above",
    ),
  );
}

onSubmit("put-topic", async (data) => {
  const spec = {};
  if (data.queues) spec.queues = Number(data.queues);
  if (data.message_type) spec.message_type = data.message_type;
  const topic = await api("PUT", path`/v1/topics/${data.topic}`, spec);
  notice(`topic ${topic.topic}: ${topic.message_type}, ${topic.queues} queues`);
  history.replaceState(null, "", path`/console/topics?topic=${topic.topic}`);
  await load();
});

start(load);
