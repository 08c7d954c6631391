-- wrk -s transaction.lua TRANSACTIONS_URL -- BODY_FILE: half + commit pairs (bench.wrk).
-- Each half message's answer names its transaction; the next request on the thread commits it
-- (POST /v1/transactions/{id}/commit), else a new half message goes out. A pair counts once its
-- commit is answered with a 2xx; a failed half or commit counts as a failed pair.
package.path = debug.getinfo(1, "S").source:match("^@(.*/)") .. "?.lua;" .. package.path
local tally = require("tally")
local half, headers
local to_commit = {}

function init(args)
  local file = assert(io.open(args[1], "rb"))
  headers = { ["Content-Type"] = "application/json" }
  local key = os.getenv("BENCH_API_KEY")
  if key and key ~= "" then
    headers["Authorization"] = "Bearer " .. key
  end
  half = wrk.format("POST", nil, headers, file:read("*a"))
  file:close()
end

function request()
  local id = table.remove(to_commit)
  if id then
    return wrk.format("POST", "/v1/transactions/" .. id .. "/commit", headers, "")
  end
  return half
end

function response(status, _, body)
  local good = status >= 200 and status < 300
  local id = good and body:match('"transaction_id"%s*:%s*"([^"]+)"')
  if id and not body:find('"outcome":', 1, true) then
    table.insert(to_commit, id)  -- a half message's answer: its pair is counted when the commit is
  else
    tally.counted(good, status, body)
  end
end
