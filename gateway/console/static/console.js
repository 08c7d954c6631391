// The console's one way to /v1: the key from this tab's sessionStorage as a Bearer header (never a cookie), JSON
// bodies (so the gateway's 415 rule and Origin check hold), and every problem shown on the page, never a blank.
const KEY = "petrel.console.key";
const reloaders = [];

export class ApiProblem extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

export async function api(method, path, body) {
  const headers = { accept: "application/json" };
  const key = sessionStorage.getItem(KEY);
  if (key) headers.authorization = `Bearer ${key}`;
  const init = { method, headers, credentials: "omit", cache: "no-store" };
  if (body !== undefined) {
    headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const answer = await fetch(path, init);
  if (answer.status === 401) askForKey();
  if (!answer.ok) throw new ApiProblem(answer.status, await problemOf(answer));
  return answer.status === 204 ? null : answer.json();
}

export const get = (path) => api("GET", path);

async function problemOf(answer) {
  try {
    return await answer.json();
  } catch {
    return { title: answer.statusText, status: answer.status, detail: `HTTP ${answer.status} ${answer.statusText}` };
  }
}

function askForKey() {
  const form = document.getElementById("key-form");
  form.hidden = false;
  form.elements.key.focus();
}

function setUpKeyForm() {
  const form = document.getElementById("key-form");
  const forget = document.getElementById("forget-key");
  forget.hidden = !sessionStorage.getItem(KEY);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY, form.elements.key.value.trim());
    form.reset();
    form.hidden = true;
    forget.hidden = false;
    clearProblems();
    reloaders.forEach((load) => run(load));
  });
  forget.addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    forget.hidden = true;
    location.reload();
  });
}

export function clearProblems() {
  document.getElementById("problems").replaceChildren();
}

export function showProblem(error, doing) {
  const box = document.getElementById("problems");
  const p = error instanceof ApiProblem ? error.problem : { detail: String(error.message || error) };
  const status = error instanceof ApiProblem ? `${error.status} ` : "";
  const slug = p.type ? p.type.split("/").pop() : "";
  const line = el("p", { class: "problem" }, `${doing ? doing + ": " : ""}${status}${p.title || "failed"}`);
  if (slug) line.append(" ", el("code", {}, slug));
  if (p.detail) line.append(el("span", { class: "detail" }, p.detail));
  box.append(line);
}

export function notice(text) {
  const box = document.getElementById("problems");
  box.append(el("p", { class: "notice" }, text));
}

// body[data-loaded] marks a page whose loader has finished, well or not (the browser tests wait on it).
async function run(load) {
  delete document.body.dataset.loaded;
  try {
    await load();
  } catch (error) {
    if (!(error instanceof ApiProblem && error.status === 401)) showProblem(error);
    else showProblem(error, "the gateway asks for a key");
  } finally {
    document.body.dataset.loaded = "";
  }
}

// A page's loader: run at start, and again when a key is given.
export function start(load) {
  reloaders.push(load);
  const go = () => {
    setUpKeyForm();
    run(load);
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", go);
  else go();
}

// A form whose submit is a /v1 call: its problem shows above the page, its answer through `then`.
export function onSubmit(id, action) {
  const form = document.getElementById(id);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearProblems();
    const button = form.querySelector("button[type=submit]");
    if (button) button.disabled = true;
    try {
      await action(Object.fromEntries(new FormData(form)), form);
    } catch (error) {
      showProblem(error, form.dataset.doing || "");
    } finally {
      if (button) button.disabled = false;
    }
  });
  return form;
}

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

export function link(href, text) {
  return el("a", { href }, text);
}

// columns: [label, row => cell] pairs; a cell is text, a number or a node.
export function table(columns, rows, empty = "none") {
  if (!rows.length) return el("p", { class: "empty" }, empty);
  const head = el("tr", {}, columns.map(([label]) => el("th", {}, label)));
  const body = rows.map((row) =>
    el("tr", {}, columns.map(([, cell]) => {
      const value = cell(row);
      return el("td", typeof value === "number" ? { class: "num" } : {}, value ?? "");
    })),
  );
  return el("table", {}, el("thead", {}, head), el("tbody", {}, body));
}

export function fill(id, ...nodes) {
  document.getElementById(id).replaceChildren(...nodes);
}

export function when(value) {
  if (value === null || value === undefined || value === "") return "";
  const date = typeof value === "number" ? new Date(value) : new Date(value);
  return Number.isNaN(date.getTime()) ? String(value) : date.toISOString().replace(".000Z", "Z");
}

export function bytes(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

export function rate(n) {
  return n === null || n === undefined ? "" : `${Number(n).toFixed(1)}/s`;
}

export function param(name) {
  return new URLSearchParams(location.search).get(name) || "";
}

export const path = (strings, ...values) =>
  strings.reduce((out, part, i) => out + part + (i < values.length ? encodeURIComponent(values[i]) : ""), "");
