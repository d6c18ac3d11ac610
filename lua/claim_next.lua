--[[
  claim_next: the busy path of a worker. Reads up to `count` new entries of the
  partition's work stream for this consumer (XREADGROUP, which a script may run
  when it does not block) and claims each one exactly as claim does, in one
  round trip instead of a read and one claim per entry. An idle worker blocks
  in XREADGROUP outside any script and claims what it gets with claim.
  Each task's keys are built here from the partition's hash tag, the way
  KeySpace.task builds them (task_keys), so they share the declared keys' slot.

  Includes: common, keys, claim

  KEYS:
    1 work           the partition's work stream
    2 events         the partition's event stream
    3 stats          the partition's stats hash (terminal transitions, pickups)
  ARGV:
    1 tag            the partition's hash tag, e.g. {rt:3.17}
    2 consumer       the worker's consumer name (lease owner)
    3 count          the most entries to read
    4 lease_ms
    5 max_attempts
    6 poison_error   msgpack JSON-RPC error for a poisoned task
    7 event_opts     the event stream's MAXLEN, then "p" to also SPUBLISH
  Returns:
    {RC_OK, entry_id, task_id, claim reply, entry_id, task_id, claim reply, ...}
    where each claim reply is one of claim's. An entry that names no well-formed
    task ID is dropped and reported as {RC_NOT_FOUND} with task_id ''.
  The batch's first claims are added to the pickup histogram with one HINCRBY
  per bucket met.
  Events: one entry per task that ends here (cancelled, poisoned).
]]
local work_key = KEYS[1]
local events_key = KEYS[2]
local stats_key = KEYS[3]
local tag = ARGV[1]
local consumer = ARGV[2]
local count = tonumber(ARGV[3])
local lease_ms = tonumber(ARGV[4])
local max_attempts = tonumber(ARGV[5])
local poison_error = ARGV[6]
local event_opts = ARGV[7]

local out = {RC_OK}
local pickups = {}
local read = redis.call('XREADGROUP', 'GROUP', WORK_GROUP, consumer,
  'COUNT', count, 'STREAMS', work_key, '>')
if not read then
  return out
end
for _, entry in ipairs(read[1][2]) do
  local entry_id, fields = entry[1], entry[2]
  local task_id = ''
  for i = 1, #fields - 1, 2 do
    if fields[i] == 't' then
      task_id = fields[i + 1]
    end
  end
  local reply
  -- Anything but a task ID parse_task_id accepts is not ours, and must not
  -- become part of a key name.
  if not is_task_id(task_id) then
    task_id = ''
    drop_entry(work_key, entry_id)
    reply = {RC_NOT_FOUND}
  else
    reply = claim_entry(task_keys(tag, task_id, work_key, events_key, stats_key), task_id,
      entry_id, consumer, lease_ms, max_attempts, poison_error, event_opts, pickups)
  end
  table.insert(out, entry_id)
  table.insert(out, task_id)
  table.insert(out, reply)
end
record_pickups(stats_key, pickups)
return out
