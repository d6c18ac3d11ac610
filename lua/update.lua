--[[
  update: authorize a client and accept its answers to outstanding input
  requests. Answers to keys that are not outstanding (never issued, already
  answered, superseded) and answers of the wrong variant are ignored; a task
  not in input_required ignores the update. When no request remains
  outstanding the task returns to working, and a parked task (no worker holds it:
  waiting.lua) is queued again in the same call, at the head of its tenant's
  queue, for a worker to run its handler again (resume_task): exactly once per
  round, since only the answer that empties the outstanding set resumes it. Its
  answers not yet taken are dropped then: the next run replays every round from
  the journal. An update that changes nothing (a retry whose first attempt took
  the answers) rewrites the status it read, so its WAIT confirms the state it
  answers about (common's confirm_state).

  Includes: common, waiting

  KEYS:
    1 task           the task record hash
    2 requests       outstanding input requests (key -> kind..body)
    3 answers        accepted answers not yet taken by the worker
    4 journal        every accepted answer, for replay after a crash
    5 events         the partition's event stream
    6 signals        the partition's signal stream (what workers listen to)
    7 grant          the grant key of (task ID, endpoint, binding)
    8 work           the partition's work stream (a parked task resumed goes there)
    9 stats          the partition's stats hash (queued)
  ARGV:
    1 task_id
    2 binding        the record's digest of (task ID, endpoint, partition binding)
    3 event_opts     the event stream's MAXLEN, then "p" to also SPUBLISH
    4 fair           "1" when fair dispatch is on (a resumed task joins its tenant's queue)
    5.. responses    triples: key, kinds (letters the answer can match), body
  Returns:
    {RC_OK, accepted_count}
    {RC_NOT_FOUND}   unknown, expired or unauthorized
  Events: one entry, and one signal for the task's worker, when at least one
  answer was accepted; a parked task resumed into a busy partition is signalled as
  a newcomer's instead (no worker holds it).
]]
local task_key = KEYS[1]
local requests_key = KEYS[2]
local answers_key = KEYS[3]
local journal_key = KEYS[4]
local events_key = KEYS[5]
local signals_key = KEYS[6]
local grant_key = KEYS[7]
local work_key = KEYS[8]
local stats_key = KEYS[9]
local task_id = ARGV[1]
local binding = ARGV[2]
local event_opts = ARGV[3]
local fair = ARGV[4] == '1'
local first_answer = 5

if not granted(grant_key) then
  return {RC_NOT_FOUND}
end
local t = read_record(task_key, 'bd', 'st', 'ua', 'ex', 'sm', 'pw', 'tn', 'tc')
if t.bd ~= binding then
  return {RC_NOT_FOUND}
end
-- An update that changes nothing (the task waits for no input, or these answers were
-- taken already: by this call's own first attempt, maybe) is confirmed like one
-- that does (see confirm_state).
if t.st ~= ST_INPUT_REQUIRED or #ARGV < first_answer then
  confirm_state(task_key, 'st', t.st)
  return {RC_OK, 0}
end
local keys = {}
for i = first_answer, #ARGV, 3 do
  table.insert(keys, ARGV[i])
end
local requests = redis.call('HMGET', requests_key, unpack(keys))

local accepted_keys = {}
local accepted_pairs = {}
for n, key in ipairs(keys) do
  local i = first_answer + (n - 1) * 3
  local kinds, body = ARGV[i + 1], ARGV[i + 2]
  local request = requests[n]
  if request and string.find(kinds, string.sub(request, 1, 1), 1, true) then
    table.insert(accepted_keys, key)
    table.insert(accepted_pairs, key)
    table.insert(accepted_pairs, body)
  end
end
if #accepted_keys == 0 then
  confirm_state(task_key, 'st', t.st)
  return {RC_OK, 0}
end

redis.call('HDEL', requests_key, unpack(accepted_keys))
local last = redis.call('EXISTS', requests_key) == 0
local expire_at = t.ex
if last and t.pw then
  -- The parked task's next run replays every round from the journal, its claim
  -- handing it the answers (claim.lua's recorded_answers): none is left for
  -- take_answers to hand out again.
  redis.call('DEL', answers_key)
else
  redis.call('HSET', answers_key, unpack(accepted_pairs))
  expire_with_task(answers_key, expire_at)
end
redis.call('HSET', journal_key, unpack(accepted_pairs))
expire_with_task(journal_key, expire_at)

local resumed = false
if last then
  -- The last answer: back to working, and the wait's message no longer applies.
  write_status(task_key, ST_WORKING, nil, t.sm, t.ua)
  if t.pw then
    local keys = {task = task_key, work = work_key, stats = stats_key, signals = signals_key}
    resume_task(keys, task_id, t, fair, {event_opts = event_opts})
    resumed = true
  end
else
  redis.call('HSET', task_key, 'ua', int_text(next_update(now_ms(), t.ua)))
end
emit(events_key, event_opts, task_id)
if not resumed and not t.pw then
  -- A worker holds the task: it takes the answers now rather than at its next poll.
  emit(signals_key, event_opts, task_id)
end
return {RC_OK, #accepted_keys}
