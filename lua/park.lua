--[[
  park: a worker gives back a task whose handler waits for its client's input
  (includes/waiting.lua tells why). The lease ends here: the fence is bumped (the
  handler's late writes are refused), the attempt is not counted against
  max_attempts (waiting is no failure), the work entry is acknowledged and
  deleted, and a capped tenant's task stops counting as running (its run set),
  which may let the tenant out of the parked set. The task stays
  `input_required` with its requests; it is marked parked (`pw`), counted among
  the parked tasks, and how many times it was parked (`np`) goes up by one: the
  claim that runs it again tells its handler. Nothing is parked when no request
  is outstanding (its round was answered since the worker looked: it takes the
  answers and goes on) or cancellation was asked (its handler ends it).

  Includes: common, keys, work, tenants, waiting

  KEYS:
    1 task           the task record hash
    2 requests       outstanding input requests
    3 work           the partition's work stream
  ARGV:
    1 task_id
    2 fence
  Returns:
    {RC_OK, parked}  parked: 1 when the task is parked now, 0 when it is not
                     (answered meanwhile, or cancellation asked)
    {RC_NOT_FOUND} | {RC_LEASE_LOST} | {RC_TERMINAL}
  Events: none (what a client sees does not change).
]]
local task_key = KEYS[1]
local requests_key = KEYS[2]
local work_key = KEYS[3]
local task_id = ARGV[1]
local fence = ARGV[2]

local t = read_record(task_key, 'st', 'fn', 'at', 'wk', 'tn', 'tc', 'ex', 'cx', 'np')
local guard = worker_guard(t.st, t.fn, fence)
if guard ~= RC_OK then
  return {guard}
end
if t.st ~= ST_INPUT_REQUIRED or t.cx == '1' or redis.call('EXISTS', requests_key) == 0 then
  return {RC_OK, 0}
end
if t.wk then
  drop_entry(work_key, t.wk, task_id)
end
local attempts = math.max((tonumber(t.at) or 1) - 1, 0)
redis.call('HDEL', task_key, 'wk', 'lo')
redis.call('HSET', task_key, 'fn', int_text(tonumber(t.fn) + 1), 'at', int_text(attempts),
  'ld', '0', 'pw', '1', 'np', int_text((tonumber(t.np) or 0) + 1))
local call = {}
if t.tn then
  local tag = tag_of(task_key, task_id)
  add_waiting(tag, t.tn, task_id, t.ex, now_ms())
  if t.tc then
    release_tenant_slot(tag, t.tn, task_id, call)
  end
end
ring_due(call, work_key)
return {RC_OK, 1}
