--[[
  release: a worker shutting down hands a task back. The fence is bumped (the
  abandoned handler's late writes are refused), the attempt is not counted
  against max_attempts, and the task is re-enqueued as a fresh work entry so
  an idle worker picks it up at once instead of waiting out the lease. The rest
  of the record stays (origin, payload, trace context): the next claim runs the
  same task, and its span links to the same creation. A capped tenant's task
  stops counting as running (its run set, named from the task key's tag and the
  record's tenant), which may let the tenant out of the parked set.

  Includes: common, keys, work, tenants

  KEYS:
    1 task           the task record hash
    2 work           the partition's work stream
  ARGV:
    1 task_id
    2 fence
  Returns:
    {RC_OK}
    {RC_NOT_FOUND} | {RC_LEASE_LOST} | {RC_TERMINAL}
  Events: none (nothing a client sees changes).
]]
local task_key = KEYS[1]
local work_key = KEYS[2]
local task_id = ARGV[1]
local fence = ARGV[2]

local t = read_record(task_key, 'st', 'fn', 'at', 'wk', 'tn', 'tc')
local guard = worker_guard(t.st, t.fn, fence)
if guard ~= RC_OK then
  return {guard}
end
if t.wk then
  drop_entry(work_key, t.wk, task_id)
end
local attempts = math.max((tonumber(t.at) or 1) - 1, 0)
local fields = {'fn', int_text(tonumber(t.fn) + 1), 'at', int_text(attempts), 'ld', '0'}
add_work(work_key, task_id, fields)
redis.call('HSET', task_key, unpack(fields))
redis.call('HDEL', task_key, 'lo')
local call = {}
if t.tn and t.tc then
  release_tenant_slot(tag_of(task_key, task_id), t.tn, task_id, call)
end
ring_due(call, work_key)
return {RC_OK}
