import { api, el, fill, get, notice, param, path, showProblem, start, table, when } from "../console.js";

async function redrive(group, messageIds) {
  const body = messageIds ? { message_ids: messageIds } : {};
  try {
    const result = await api("POST", path`/v1/groups/${group}/dlq:redrive`, body);
    notice(`redriven ${result.redriven}${result.not_found.length ? `, not found: ${result.not_found.join(", ")}` : ""}, ${result.remaining} remaining`);
    await show(group);
  } catch (error) {
    showProblem(error, "redrive");
  }
}

async function show(group) {
  const dlq = await get(path`/v1/groups/${group}/dlq?max=100`);
  const count = dlq.queues.reduce((n, q) => n + (q.max_offset - q.min_offset), 0);
  fill(
    "dlq",
    el("h2", {}, `${count} dead letters of ${group} `, dlq.messages.length ? el("button", { type: "button", id: "redrive-all", onclick: () => redrive(group, null) }, "Redrive all") : ""),
    table(
      [
        ["message id", (m) => el("a", { href: path`/console/messages?id=${m.message_id}` }, m.message_id)],
        ["topic", (m) => m.original_topic],
        ["keys", (m) => m.keys.join(", ")],
        ["attempts", (m) => m.attempts],
        ["why", (m) => m.reason ?? ""],
        ["dead-lettered", (m) => when(m.dead_lettered_at)],
        ["body", (m) => (m.body ?? "(binary)").slice(0, 80)],
        ["", (m) => el("button", { type: "button", class: "redrive", "data-id": m.message_id, onclick: () => redrive(group, [m.message_id]) }, "Redrive")],
      ],
      dlq.messages,
      "no dead letter",
    ),
  );
}

document.getElementById("pick-group").addEventListener("submit", (event) => {
  event.preventDefault();
  location.search = `?group=${encodeURIComponent(event.target.elements.group.value)}`;
});

start(async () => {
  const group = param("group");
  if (!group) return;
  document.getElementById("pick-group").elements.group.value = group;
  await show(group);
});
