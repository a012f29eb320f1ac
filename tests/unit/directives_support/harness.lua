-- A pure-logic harness for the rendered job_submit.lua: it plays slurmctld's
-- part (the `slurm` table, job_desc and job_rec tables) so the same plugin
-- code can be fed the same scripts as the Python validator.
--
-- usage: lua harness.lua PLUGIN CASES OUT
-- CASES holds records "<kind> <uid> <account> <partition> <extra> <nbytes>\n<nbytes of
-- script or admin_comment>\n"; "-" means nil. kind: submit | submitac (extra: the
-- admin_comment sent, "_" for spaces) | modify | duration | bench (extra: repetitions).
-- OUT gets one block per case: lines "RC n", "ADMIN text", "REQUEUE n", "MSG text", "END".
local plugin_path, cases_path, out_path = arg[1], arg[2], arg[3]

local messages = {}
slurm = {
  SUCCESS = 0, ERROR = -1, ESLURM_ACCESS_DENIED = 2002,
  log_user = function(fmt, ...) messages[#messages + 1] = string.format(fmt, ...) end,
  log_info = function(fmt, ...) end,
  log_error = function(fmt, ...) messages[#messages + 1] = "LOGERROR " .. string.format(fmt, ...) end,
}
local chunk = assert(loadfile(plugin_path))
assert(chunk() == slurm.SUCCESS, "the plugin must return slurm.SUCCESS when loaded")
assert(type(slurm_job_submit) == "function" and type(slurm_job_modify) == "function")

local f = assert(io.open(cases_path, "rb"))
local data = f:read("*a")
f:close()
local out = assert(io.open(out_path, "wb"))

local function opt(v) if v == "-" then return nil end return v end
local function cstring(s)  -- slurmctld hands the script over with lua_pushstring
  local nul = string.find(s, "\0", 1, true)
  if nul then return string.sub(s, 1, nul - 1) end
  return s
end

local pos = 1
while pos <= #data do
  local nl = string.find(data, "\n", pos, true)
  local header = string.sub(data, pos, nl - 1)
  local kind, uid, account, partition, extra, n =
    string.match(header, "^(%S+) (%S+) (%S+) (%S+) (%S+) (%d+)$")
  n = tonumber(n)
  local body = string.sub(data, nl + 1, nl + n)
  pos = nl + n + 2
  messages = {}
  if kind == "duration" then
    local v = _SPOLICY.parse_duration(body)
    out:write("RC ", v == nil and "nil" or string.format("%d", v), "\n")
  elseif kind == "bench" then
    -- extra: repetitions; prints CPU seconds per slurm_job_submit call
    local reps = tonumber(extra)
    local t0 = os.clock()
    for _ = 1, reps do
      slurm_job_submit({ script = cstring(body) }, {}, tonumber(uid))
    end
    out:write("RC ", string.format("%.9f", (os.clock() - t0) / reps), "\n")
  elseif kind == "submit" or kind == "submitac" then
    local part_list = {}
    local job_desc = { script = cstring(body), account = opt(account), partition = opt(partition) }
    if kind == "submitac" then
      job_desc.admin_comment = extra  -- what the submitter sent (underscores for spaces)
      job_desc.admin_comment = string.gsub(job_desc.admin_comment, "_", " ")
    elseif opt(extra) then
      part_list[extra] = { flag_default = 1 }
    end
    local rc = slurm_job_submit(job_desc, part_list, tonumber(uid))
    out:write("RC ", tostring(rc), "\n")
    out:write("ADMIN ", tostring(job_desc.admin_comment), "\n")
    out:write("REQUEUE ", tostring(job_desc.requeue), "\n")
  elseif kind == "modify" then
    -- extra: "requeue0" to turn requeue off, "admincomment" to set admin_comment
    local job_desc = { account = opt(account), partition = opt(partition) }
    if extra == "requeue0" then job_desc.requeue = 0 else job_desc.requeue = 65534 end
    if extra == "admincomment" then job_desc.admin_comment = "spolicy:v1 class=production" end
    -- Floats, as slurmctld pushes them (lua_pushnumber): 42.0 under Lua 5.3.
    local job_rec = { job_id = 42.0, admin_comment = body }
    local rc = slurm_job_modify(job_desc, job_rec, {}, tonumber(uid) + 0.0)
    out:write("RC ", tostring(rc), "\n")
  end
  for i = 1, #messages do out:write("MSG ", messages[i], "\n") end
  out:write("END\n")
end
out:close()
