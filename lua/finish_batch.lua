--[[
  finish_batch: the fenced finishes of many tasks of one partition in one call,
  each exactly as finish.lua does it for its lease holder (operation ""): the
  same checks in the same order, the same terminal write, the same answer to a
  retry of the very same transition. What the tasks share is written once: the
  clock is read once, their work entries are acknowledged and deleted with one
  XACK and one XDEL, the stats count each status with one HINCRBY, and on a
  cluster one SPUBLISH carries every task's hint (one line each). A worker
  whose handlers end together so sends one script call per partition where it
  sent one per task. Unfenced finishes (a client's or an operator's) stay with
  finish.lua: they carry an operation ID and signal the task's worker.

  Includes: common, keys, terminal

  KEYS:
    1 work           the partition's work stream
    2 events         the partition's event stream
    3 stats          the partition's stats hash (one more of each status)
  ARGV:
    1 tag            the partition's hash tag, e.g. {rt:3.17}
    2 event_opts     the event stream's MAXLEN, then "p" to also SPUBLISH
    3.. outcomes     seven per task: task_id, fence, status, has_message, message,
                     outcome_field, outcome (as finish.lua's ARGV 1 to 7)
  Returns:
    {RC_OK, code, code, ...}  one code per outcome, in order: RC_OK (also for the
    lease holder's same transition again), RC_NOT_FOUND (a task ID that names no
    task of this partition included), RC_LEASE_LOST or RC_TERMINAL
  Events: one entry per task it ends; published ("p"), one message for them all.
]]
local work_key = KEYS[1]
local events_key = KEYS[2]
local stats_key = KEYS[3]
local tag = ARGV[1]
local event_opts = ARGV[2]
local first_outcome = 3
local per_outcome = 7

local out = {RC_OK}
local batch = {now = now_ms(), entries = {}, counts = {}, hints = {}}

-- One outcome, as finish.lua decides it for a fenced call; its return code.
local function finish_one(task_id, fence, status, has_message, message, outcome_field, outcome)
  -- Anything but a task ID of this partition must not become part of a key name.
  if not is_task_id(task_id) or string.match(task_id, '^(%d+)%.') ~= tag_partition(tag) then
    return RC_NOT_FOUND
  end
  local keys = task_keys(tag, task_id, work_key, events_key, stats_key)
  return (finish_task(keys, task_id, fence, status, has_message and message or nil,
    outcome_field, outcome, '', event_opts, batch))
end

for i = first_outcome, #ARGV - per_outcome + 1, per_outcome do
  out[#out + 1] = finish_one(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3] == '1',
    ARGV[i + 4], ARGV[i + 5], ARGV[i + 6])
end
local entries = batch.entries
if #entries > 0 then
  -- pcall: an operator may have deleted the group; the entries go regardless.
  redis.pcall('XACK', work_key, WORK_GROUP, unpack(entries))
  redis.call('XDEL', work_key, unpack(entries))
end
for status, count in pairs(batch.counts) do
  redis.call('HINCRBY', stats_key, status, count)
end
publish_hints(events_key, batch.hints)
return out
