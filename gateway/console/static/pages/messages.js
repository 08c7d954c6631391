import { el, fill, get, onSubmit, param, path, start, table, when } from "../console.js";

const MESSAGE_COLUMNS = [
  ["message id", (m) => el("a", { href: path`/console/messages?id=${m.message_id}` }, m.message_id)],
  ["topic", (m) => m.topic],
  ["broker", (m) => m.broker],
  ["queue", (m) => m.queue_id],
  ["offset", (m) => m.queue_offset],
  ["tag", (m) => m.tag ?? ""],
  ["keys", (m) => m.keys.join(", ")],
  ["stored", (m) => when(m.stored_at)],
  ["body", (m) => (m.body ?? "(binary)").slice(0, 80)],
];

function timeParam(value) {
  return /^\d+$/.test(value) ? value : value ? String(Date.parse(value)) : "";
}

async function trace(id) {
  const [message, steps] = await Promise.all([get(path`/v1/messages/${id}`), get(path`/v1/messages/${id}/trace`)]);
  fill(
    "trace",
    el("h2", {}, `Message ${steps.message_id} in ${steps.topic}`),
    el("p", {}, `stored on ${steps.stored.broker}, queue ${steps.stored.queue}, offset ${steps.stored.queue_offset}, at ${when(steps.stored_at)}` +
      (steps.scheduled ? `; scheduled for ${when(steps.scheduled.due_at)} (${steps.scheduled.state})` : "") +
      (steps.transaction ? `; transaction ${steps.transaction.transaction_id} ${steps.transaction.state}` : "")),
    el("h2", {}, "Steps"),
    table(
      [
        ["at", (s) => when(s.at)],
        ["what", (s) => s.what],
        ["group", (s) => s.group ?? ""],
        ["detail", (s) => s.detail],
      ],
      steps.steps,
      "no step yet",
    ),
    el("h2", {}, "Per group"),
    table(
      [
        ["group", (g) => el("a", { href: path`/console/groups?group=${g.group}` }, g.group)],
        ["state", (g) => g.state],
        ["attempts", (g) => g.attempts],
        ["leases in flight", (g) => g.leases_in_flight],
        ["consumer offset", (g) => g.consumer_offset],
        ["retries", (g) => g.retries.map((r) => `level ${r.level} due ${when(r.due_at)}`).join("; ")],
        ["dead letter", (g) => (g.dead_letter ? `${g.dead_letter.topic} #${g.dead_letter.queue_offset}` : "")],
      ],
      steps.groups,
      "no group subscribes to its topic",
    ),
    steps.push.length ? el("h2", {}, "Push") : "",
    steps.push.length
      ? table(
          [
            ["group", (p) => p.group],
            ["subscription", (p) => p.subscription],
            ["attempts", (p) => p.attempts],
            ["last status", (p) => p.last_status ?? ""],
            ["last error", (p) => p.last_error ?? ""],
            ["delivered", (p) => (p.delivered ? "yes" : "no")],
          ],
          steps.push,
        )
      : "",
    el("h2", {}, "Body"),
    el("pre", {}, message.body ?? `(base64) ${message.body_base64}`),
  );
}

async function peek(topic, max) {
  const described = await get(path`/v1/topics/${topic}`);
  // The topic's answer holds each queue's offsets (a key that may read the topic gets them).
  const queues = described.brokers.filter((b) => b.available).flatMap((b) => b.queues.map((q) => [b.broker, q]));
  const pulls = await Promise.all(
    queues.map(async ([broker, queue]) => {
      const b = encodeURIComponent(broker);
      const queueId = queue.queue_id;
      const from = Math.max(queue.min_offset, queue.max_offset - max);
      if (queue.max_offset <= from) return [];
      const pulled = await get(path`/v1/topics/${topic}/queues/${queueId}/messages` + `?offset=${from}&max=${max}&broker=${b}`);
      return pulled.messages;
    }),
  );
  const messages = pulls.flat();
  messages.sort((a, b) => b.stored_at - a.stored_at);
  fill("results", el("h2", {}, `Newest ${max} of every queue of ${topic}: ${messages.length}`), table(MESSAGE_COLUMNS, messages, "the topic holds no message"));
}

onSubmit("by-id", async (data) => {
  history.replaceState(null, "", path`/console/messages?id=${data.id.trim()}`);
  await trace(data.id.trim());
});

onSubmit("by-key", async (data) => {
  const query = new URLSearchParams({ key: data.key });
  if (data.begin) query.set("begin", timeParam(data.begin));
  if (data.end) query.set("end", timeParam(data.end));
  const found = await get(path`/v1/topics/${data.topic}/messages` + `?${query}`);
  fill("results", el("h2", {}, `${found.messages.length} with key ${data.key}${found.truncated ? " (more not shown)" : ""}`), table(MESSAGE_COLUMNS, found.messages, "no message with that key"));
});

onSubmit("peek", async (data) => {
  await peek(data.topic, Number(data.max || 5));
});

start(async () => {
  if (param("id")) {
    document.getElementById("by-id").elements.id.value = param("id");
    await trace(param("id"));
  }
  if (param("peek")) {
    document.getElementById("peek").elements.topic.value = param("peek");
    await peek(param("peek"), 5);
  }
});
