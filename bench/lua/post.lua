-- wrk -s post.lua URL -- BODY_FILE [REQUIRE]: POST the same JSON body on every connection (bench.wrk).
-- An answer counts when it is a 2xx whose body holds no '"error":{' (a batch entry that failed)
-- and, given REQUIRE, holds that text. BENCH_API_KEY, when set, rides as a bearer token.
package.path = debug.getinfo(1, "S").source:match("^@(.*/)") .. "?.lua;" .. package.path
local tally = require("tally")
local require_text

function init(args)
  local file = assert(io.open(args[1], "rb"))
  wrk.method = "POST"
  wrk.body = file:read("*a")
  file:close()
  wrk.headers["Content-Type"] = "application/json"
  local key = os.getenv("BENCH_API_KEY")
  if key and key ~= "" then
    wrk.headers["Authorization"] = "Bearer " .. key
  end
  require_text = args[2]
end

function response(status, _, body)
  local good = status >= 200 and status < 300 and not body:find('"error":{', 1, true)
  if good and require_text then
    good = body:find(require_text, 1, true) ~= nil
  end
  tally.counted(good, status, body)
end
