--[[
  inspect_tenants: one partition's tenants as an operator sees them (redis-tasks
  tenants), read-only. The tenants read are those seen in the last day (a plan
  kept or a create refused: the `seen` index, most recent first), those with
  tasks waiting (the ring, then the parked set), up to `sample` of each, and those
  of up to `sample` parked tasks (waiting for their client's input: the
  partition's `waiting` set, soonest to expire first). For each, from its own keys
  in this partition: its open tasks (its open set, counted above now: a quota's
  count), its running tasks (its run set: a cap's count), its queued tasks (its
  queue's length), its plan's terms as its latest create kept them, its refused
  creates by reason (the last day), whether it waits in the ring or is parked,
  and its tasks waiting for input (its `wt` set). Tenants are their digests; a
  member names keys after this partition's tag only, so even a foreign member
  could only name a key of this slot.

  Includes: common, keys

  KEYS:
    1 seen           the partition's index of tenants seen in the last day
    2 ring           the partition's ring of tenants with tasks waiting
    3 parked         the partition's tenants parked at their concurrency cap
  ARGV:
    1 tag            the partition's hash tag, e.g. {rt:3.17}
    2 sample         the most tenants to read from each of the three sets (and
                     parked tasks from the waiting set)
  Returns:
    {RC_OK, now_ms, complete, rows}
    complete         1 when every tenant of the four sets was read, else 0
    rows             nine per tenant, flat: {tenant, open, running, queued,
                     terms ('' for none), refused quota, refused rate, waiting,
                     input} where waiting is 0 (not waiting), 1 (in the ring) or
                     2 (parked), and input counts its tasks waiting for input
  Events: none (read-only).
]]
local seen_key = KEYS[1]
local ring_key = KEYS[2]
local parked_key = KEYS[3]
local tag = ARGV[1]
local sample = tonumber(ARGV[2])

local now = now_ms()
local after = '(' .. int_text(now)
local tenants, order = {}, {}
local complete = 1

-- Read up to `sample` members of `members` (a reply of tenant digests) into the
-- tenants read, once each; `total` is how many the set holds.
local function take(members, total)
  if total > #members then
    complete = 0
  end
  for _, tenant in ipairs(members) do
    if not tenants[tenant] then
      tenants[tenant] = true
      order[#order + 1] = tenant
    end
  end
end

take(redis.call('ZRANGE', seen_key, '+inf', int_text(now - REFUSALS_KEPT_MS), 'BYSCORE', 'REV',
  'LIMIT', 0, sample), redis.call('ZCOUNT', seen_key, int_text(now - REFUSALS_KEPT_MS), '+inf'))
take(redis.call('ZRANGE', ring_key, 0, sample - 1), redis.call('ZCARD', ring_key))
take(redis.call('ZRANGE', parked_key, 0, sample - 1), redis.call('ZCARD', parked_key))
-- The tenants of parked tasks, from the records of up to `sample` of them.
local asking = {}
local waiting_tasks = redis.call('ZRANGE', tag .. KEY_WAITING, after, '+inf', 'BYSCORE', 'LIMIT',
  0, sample)
for _, task_id in ipairs(waiting_tasks) do
  local tenant = is_task_id(task_id) and redis.call('HGET', record_key(tag, task_id), 'tn')
  if tenant then
    asking[#asking + 1] = tenant
  end
end
if redis.call('ZCOUNT', tag .. KEY_WAITING, after, '+inf') > #waiting_tasks then
  complete = 0
end
take(asking, 0)

local rows = {}
for _, tenant in ipairs(order) do
  local refused = redis.call('HMGET', tag .. KEY_REFUSED .. tenant, 'quota', 'rate')
  local waiting = 0
  if redis.call('ZSCORE', ring_key, tenant) then
    waiting = 1
  elseif redis.call('ZSCORE', parked_key, tenant) then
    waiting = 2
  end
  rows[#rows + 1] = tenant
  rows[#rows + 1] = redis.call('ZCOUNT', tag .. KEY_OPEN .. tenant, after, '+inf')
  rows[#rows + 1] = redis.call('ZCOUNT', tag .. KEY_RUN .. tenant, after, '+inf')
  rows[#rows + 1] = redis.call('LLEN', tag .. KEY_QUEUE .. tenant)
  rows[#rows + 1] = redis.call('GET', tag .. KEY_PLAN .. tenant) or ''
  rows[#rows + 1] = tonumber(refused[1]) or 0
  rows[#rows + 1] = tonumber(refused[2]) or 0
  rows[#rows + 1] = waiting
  rows[#rows + 1] = redis.call('ZCOUNT', tag .. KEY_WAITING_TENANT .. tenant, after, '+inf')
end
return {RC_OK, now, complete, rows}
