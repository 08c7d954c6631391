import { fill, get, start, table, when } from "../console.js";

const COLUMNS = [
  ["transaction", (t) => t.transaction_id],
  ["message", (t) => t.message_id],
  ["topic", (t) => t.topic],
  ["producer group", (t) => t.producer_group],
  ["checks", (t) => t.check_count],
  ["stored", (t) => when(t.stored_at)],
  ["broker", (t) => t.broker],
];

start(async () => {
  const [open, abandoned] = await Promise.all([get("/v1/transactions?state=open&max=100"), get("/v1/transactions?state=abandoned&max=100")]);
  fill("open", table(COLUMNS, open.transactions, "no open transaction"));
  fill("abandoned", table(COLUMNS, abandoned.transactions, "no abandoned transaction"));
});
