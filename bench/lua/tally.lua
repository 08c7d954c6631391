-- What bench.wrk's scripts share: the answers each thread counted, and the one JSON line `done` prints.
-- A script that loads this calls `counted(ok, status, body)` for every answer; bench.wrk reads the last line.
local tally = {}
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

-- Per-thread globals (each wrk thread has its own Lua state; `done` reads them with thread:get).
ok, failed, first_error = 0, 0, ""

function tally.counted(good, status, body)
  if good then
    ok = ok + 1
  else
    failed = failed + 1
    if first_error == "" then
      first_error = status .. " " .. body:sub(1, 300)
    end
  end
end

local function json_string(text)
  return '"' .. text:gsub('[%c"\\]', function(c) return string.format("\\u%04x", c:byte()) end) .. '"'
end

function done(summary, latency, requests)
  local good, bad, first = 0, 0, ""
  for _, thread in ipairs(threads) do
    good = good + thread:get("ok")
    bad = bad + thread:get("failed")
    if first == "" then first = thread:get("first_error") end
  end
  local e = summary.errors
  io.write(string.format(
    '{"ok": %d, "failed": %d, "first_error": %s, "requests": %d, "seconds": %.6f, ' ..
    '"socket_errors": %d, "p99_ms": %.3f}\n',
    good, bad, json_string(first), summary.requests, summary.duration / 1e6,
    e.connect + e.read + e.write + e.timeout, latency:percentile(99) / 1000))
end

return tally
