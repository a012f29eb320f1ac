-- Plays slurmctld for the pool routing of the rendered job_submit.lua.
-- usage: lua route_harness.lua PLUGIN CASES OUT
-- CASES: records "<tres_per_node>\t<tres_per_job>\t<min_nodes>\t<max_nodes>\t<partition>\t<nbytes>\n<script>\n";
-- "-" means nil. OUT: per case "RC n", "PARTITION p", "MSG text"..., "END".
local plugin_path, cases_path, out_path = arg[1], arg[2], arg[3]
local messages = {}
slurm = {
  SUCCESS = 0, ERROR = -1, ESLURM_ACCESS_DENIED = 2002,
  log_user = function(fmt, ...) messages[#messages + 1] = string.format(fmt, ...) end,
  log_info = function(fmt, ...) end,
  log_error = function(fmt, ...) messages[#messages + 1] = "LOGERROR " .. string.format(fmt, ...) end,
}
local chunk = assert(loadfile(plugin_path))
assert(chunk() == slurm.SUCCESS)
local f = assert(io.open(cases_path, "rb"))
local data = f:read("*a")
f:close()
local out = assert(io.open(out_path, "wb"))
local function opt(v) if v == "-" then return nil end return v end
local pos = 1
while pos <= #data do
  local nl = string.find(data, "\n", pos, true)
  local header = string.sub(data, pos, nl - 1)
  local tpn, tpj, nodes, maxn, part, n =
    string.match(header, "^([^\t]+)\t([^\t]+)\t([^\t]+)\t([^\t]+)\t([^\t]+)\t(%d+)$")
  n = tonumber(n)
  local body = string.sub(data, nl + 1, nl + n)
  pos = nl + n + 2
  messages = {}
  local job_desc = { script = body, tres_per_node = opt(tpn), tres_per_job = opt(tpj),
                     min_nodes = tonumber(opt(nodes) or "4294967294"),
                     max_nodes = tonumber(opt(maxn) or "4294967294"), partition = opt(part),
                     account = "vision" }
  local rc = slurm_job_submit(job_desc, {}, 1000)
  out:write("RC ", tostring(rc), "\n")
  out:write("PARTITION ", tostring(job_desc.partition), "\n")
  out:write("ADMIN ", tostring(job_desc.admin_comment), "\n")
  for i = 1, #messages do out:write("MSG ", messages[i], "\n") end
  out:write("END\n")
end
out:close()
