--[[
  claim_next: the busy path of a worker. Reads up to `count` new entries of the
  partition's work stream for this consumer (XREADGROUP, which a script may run
  when it does not block) and claims each one exactly as claim does, in one
  round trip instead of a read and one claim per entry. An idle worker blocks
  in XREADGROUP outside any script and claims what it gets with claim.
  When the stream runs out of new entries first, the rest of the batch is
  dispatched from the tenants' queues in weighted round-robin (tenants.lua's
  dispatch) and each task taken is claimed in place with no work entry (a direct
  claim: its `wk` is DIRECT_ENTRY, its lease deadline in the partition's lease set,
  added with one ZADD for the call; reclaimed from there once it passed). Each
  task's keys, and its partition's tenant keys, are built here from the
  partition's hash tag, the way KeySpace names them (task_keys, and KEY_QUEUE and
  the other tenant keys after the tag), so
  they share the declared keys' slot.
  With `first`, a newcomer's task (its create signalled it) is taken ahead of the
  ring's order and claimed first, before the stream's entries (tenants.lua's
  dispatch_first), when it is still the first of its tenant's queue and that
  tenant in the ring.
  With `wake` set (the caller has no free handler slot left) and tasks still
  waiting in the ring, one doorbell entry (`d`, no task) goes to the stream: a
  worker blocked on it wakes and claims the next batch itself. Doorbells this
  read meets are dropped. A call rings at most one doorbell, at its end (for
  `wake`, a capped tenant its claims unparked).
  A call that leased tasks records them under its `call_id` in the stats hash (field
  STATS_CLAIM .. consumer, one HSET a call, written over by the consumer's next
  call): the same call run again because its reply was lost (the runner retries a
  call whose connection failed) finds its own token there and is answered with
  those tasks, each claimed again as a claim retry is (its own lease given back
  as it stands: no second fence, no attempt counted), and claims nothing more.
  Without it the first run's tasks stayed leased to a worker that never heard of
  them, run by no one, until their lease ran out. In the stats hash, a declared
  key that lasts, rather than a key of its own: a key the script does not declare,
  written on a slot's new node while a migration has not moved the old node's copy
  yet, would split in two (MIGRATE then fails, BUSYKEY); a declared one that does
  not exist yet would make every claim of a migrating slot wait (TRYAGAIN) until
  the migration ends.

  Includes: common, keys, work, tenants, claim

  KEYS:
    1 work           the partition's work stream
    2 events         the partition's event stream
    3 stats          the partition's stats hash (terminal transitions, pickups, queued;
                     this consumer's claim record)
  ARGV:
    1 tag            the partition's hash tag, e.g. {rt:3.17}
    2 consumer       the worker's consumer name (lease owner)
    3 count          the most entries to read
    4 lease_ms
    5 max_attempts
    6 poison_error   msgpack JSON-RPC error for a poisoned task
    7 event_opts     the event stream's MAXLEN, then "p" to also SPUBLISH
    8 wake           "1" to ring the doorbell if tasks still wait after this batch
    9 first          a task ID to start first (see above), or ''
   10 call_id        a token of this call, the same in its retries ('' for none)
  Returns:
    {RC_OK, entry_id, task_id, claim reply, entry_id, task_id, claim reply, ...}
    where each claim reply is one of claim's, and entry_id is DIRECT_ENTRY ("0-1")
    for a task claimed straight from its tenant's queue. An entry that names no
    well-formed task ID is dropped and reported as {RC_NOT_FOUND} with task_id ''.
  The batch's first claims are added to the pickup histogram with one HINCRBY
  per bucket met. A retry answered from its record returns the same shape (its
  tasks' claims as claim's retry answers them).
  Events: one entry per task that ends here (cancelled, poisoned); a signal for
  the newcomer's next task when it may go first too (dispatch_first).
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
local wake = ARGV[8] == '1'
local first = ARGV[9]
local call_id = ARGV[10]

local out = {RC_OK}
-- One reading of the clock for the whole batch: its claims and its dispatch.
local call = {now = now_ms(), event_opts = event_opts, pickups = {}, leased = {}, doorbell = false,
  consumer = consumer, lease_ms = lease_ms, max_attempts = max_attempts,
  poison_error = poison_error}
-- One keys table for the whole call, each task's record key written over the
-- last's (claim_entry keeps no reference to it).
local keys = task_keys(tag, '', work_key, events_key, stats_key)

-- The tasks this call leased, as entry and task ID pairs: what its retry is told.
local held = {}
local claimed_field = STATS_CLAIM .. consumer

-- Claim `task_id` (its entry `entry_id`) and add the claim to the reply; noted in
-- `held` when it runs here.
local function claim_into_reply(task_id, entry_id)
  keys.task = record_key(tag, task_id)
  local reply = claim_entry(keys, task_id, entry_id, call)
  out[#out + 1] = entry_id
  out[#out + 1] = task_id
  out[#out + 1] = reply
  if reply[1] == RC_OK then
    held[#held + 1] = entry_id
    held[#held + 1] = task_id
  end
end

-- Read up to `wanted` new entries and claim each; how many tasks it met (doorbells
-- are dropped and not counted), whether the stream ran out of new entries, and the
-- ID of the last entry read.
local function read_and_claim(wanted)
  local read = redis.call('XREADGROUP', 'GROUP', WORK_GROUP, consumer,
    'COUNT', wanted, 'STREAMS', work_key, '>')
  -- Redis answers {{stream, entries}}, or false when nothing is new. The embedded
  -- Redis (fakeredis) answers a RESP3 caller {stream, entries}, or {}.
  local entries = {}
  if read and type(read[1]) == 'table' then
    entries = read[1][2]
  elseif read and read[2] then
    entries = read[2]
  end
  local met = 0
  for _, entry in ipairs(entries) do
    local entry_id, fields = entry[1], entry[2]
    local task_id, doorbell = '', false
    for i = 1, #fields - 1, 2 do
      if fields[i] == 't' then
        task_id = fields[i + 1]
      elseif fields[i] == 'd' then
        doorbell = true
      end
    end
    if doorbell then
      drop_entry(work_key, entry_id, '')
    else
      -- Anything but a task ID parse_task_id accepts is not ours, and must not
      -- become part of a key name.
      if not is_task_id(task_id) then
        drop_entry(work_key, entry_id, '')
        out[#out + 1] = entry_id
        out[#out + 1] = ''
        out[#out + 1] = {RC_NOT_FOUND}
      else
        claim_into_reply(task_id, entry_id)
      end
      met = met + 1
    end
  end
  local last = entries[#entries]
  return met, #entries < wanted, last and last[1]
end

if call_id ~= '' then
  local last = redis.call('HGET', stats_key, claimed_field)
  if last and string.sub(last, 1, #call_id + 1) == call_id .. ' ' then
    -- This call ran already and its reply was lost: the same tasks, each claimed
    -- again as its own claim's retry is (claim_entry finds its lease held by this
    -- consumer under this entry and gives it back as it stands; a task that ended
    -- or went to another since answers as it is now).
    for entry_id, task_id in string.gmatch(string.sub(last, #call_id + 2), '(%S+) (%S+)') do
      claim_into_reply(task_id, entry_id)
    end
    lease_direct(work_key, call)
    return out
  end
end

local wanted = count
if first ~= '' and is_task_id(first) and dispatch_first(tag, stats_key, first, call) then
  claim_into_reply(first, DIRECT_ENTRY)
  wanted = wanted - 1
end
local drained = false
while wanted > 0 and not drained do
  local met
  met, drained = read_and_claim(wanted)
  wanted = wanted - met
end
if drained then
  -- Nothing new is left in the stream: the rest of the batch comes from the
  -- tenants' queues, in their round-robin order.
  if wanted > 0 then
    for _, task_id in ipairs(dispatch(tag, stats_key, wanted, call.now, call.now + lease_ms)) do
      -- Taken from its tenant's queue here, claimed with no work entry.
      claim_into_reply(task_id, DIRECT_ENTRY)
    end
  end
  if wake and redis.call('EXISTS', tag .. KEY_RING) == 1 then
    call.doorbell = true
  end
end
lease_direct(work_key, call)
record_pickups(stats_key, call.pickups)
ring_due(call, work_key)
if call_id ~= '' and #held > 0 then
  -- A retry comes within the call's deadline: the consumer's next call writes over
  -- it, and its stop (or its removal as a stale consumer) deletes it.
  redis.call('HSET', stats_key, claimed_field, call_id .. ' ' .. table.concat(held, ' '))
end
return out
