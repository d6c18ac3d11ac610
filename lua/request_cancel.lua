--[[
  request_cancel: authorize a client and record its durable cancellation
  intent. A worker may honor it, or completion may win. A task no worker holds
  (waiting in its tenant's queue or in the work stream, parked while it waits for
  input, or whose lease ran out)
  ends cancelled here and now, as the claim that met it would: its quota place,
  its running place and its place in the tenant's queue are free at once, and no
  worker runs it (a claim of its entry finds it ended). A terminal task accepts
  the request idempotently and changes nothing, as does a task whose intent is
  recorded; both rewrite the status they read, so the call's WAIT confirms the
  state it answers about (common's confirm_state).

  Includes: common, keys, work, terminal

  KEYS:
    1 task           the task record hash
    2 requests       outstanding input requests
    3 issued         issued input keys
    4 answers        accepted answers not yet taken
    5 journal        the answer journal
    6 work           the partition's work stream
    7 events         the partition's event stream
    8 stats          the partition's stats hash (cancelled, queued)
    9 signals        the partition's signal stream (what workers listen to)
    10 grant         the grant key of (task ID, endpoint, binding)
  ARGV:
    1 task_id
    2 binding        the record's digest of (task ID, endpoint, partition binding)
    3 event_opts     the event stream's MAXLEN, then "p" to also SPUBLISH
  Returns:
    {RC_OK, ended}   ended: 1 when this call ended the task, else 0
    {RC_NOT_FOUND}   unknown, expired or unauthorized
  Events: one entry when the intent is first recorded on a live task; and one
  signal for the task's worker when a live lease holds it.
]]
local task_key = KEYS[1]
local work_key = KEYS[6]
local events_key = KEYS[7]
local signals_key = KEYS[9]
local grant_key = KEYS[10]
local task_id = ARGV[1]
local binding = ARGV[2]
local event_opts = ARGV[3]

if not granted(grant_key) then
  return {RC_NOT_FOUND}
end
local t = read_record(task_key, 'bd', 'st', 'cx', 'ld', 'wk', 'ua', 'tn', 'oq', 'tc', 'pw')
if t.bd ~= binding then
  return {RC_NOT_FOUND}
end
if TERMINAL[t.st] or t.cx == '1' then
  -- Ended or asked already (this call's own first attempt, maybe): confirmed like a
  -- change (see confirm_state).
  confirm_state(task_key, 'st', t.st)
  return {RC_OK, 0}
end
local now = now_ms()
if t.ld and tonumber(t.ld) > now then
  -- A worker holds it: the intent is recorded and the worker hears of it.
  redis.call('HSET', task_key, 'cx', '1')
  emit(events_key, event_opts, task_id)
  emit(signals_key, event_opts, task_id)
  return {RC_OK, 0}
end
redis.call('HSET', task_key, 'cx', '1')
local call = {now = now, event_opts = event_opts}
terminate(leading_task_keys(), task_id, t, t.wk, {status = ST_CANCELLED}, call)
ring_due(call, work_key)
return {RC_OK, 1}
