import { api, el, fill, get, notice, onSubmit, path, showProblem, start, table, when } from "../console.js";

const words = (text) => text.split(/[\s,]+/).filter(Boolean);

async function revoke(key) {
  try {
    await api("DELETE", path`/v1/keys/${key.key_id}`);
    notice(`revoked ${key.name} (${key.key_id})`);
    await load();
  } catch (error) {
    showProblem(error, "revoke");
  }
}

async function load() {
  const list = await get("/v1/keys");
  fill(
    "keys",
    table(
      [
        ["key id", (k) => k.key_id],
        ["name", (k) => k.name],
        ["allow", (k) => k.allow.join(" ")],
        ["deny", (k) => k.deny.join(" ")],
        ["created", (k) => `${when(k.created_at)} by ${k.created_by}`],
        ["revoked", (k) => when(k.revoked_at)],
        ["", (k) => (k.revoked_at ? "" : el("button", { type: "button", onclick: () => revoke(k) }, "Revoke"))],
      ],
      list.keys,
      "no key yet",
    ),
  );
}

onSubmit("create-key", async (data, form) => {
  const created = await api("POST", "/v1/keys", { name: data.name, allow: words(data.allow), deny: words(data.deny || "") });
  form.reset();
  fill("created", el("p", { class: "notice" }, `key ${created.name}: `, el("code", { id: "new-key" }, created.key), " (shown once: copy it now)"));
  await load();
});

start(load);
