-- terminate(), the one terminal write, for finish, claim and request_cancel;
-- finish_task(), finish's decision and write for one task, for finish and
-- finish_batch.
-- Includes: common, keys, tenants, waiting

-- The one terminal write, shared by finish and claim (cancelled or poisoned at
-- claim) and request_cancel (a task no worker holds). Outcome and terminal status
-- land together; the work entry is acknowledged and deleted (a direct claim's
-- lease leaves the partition's lease set); data no longer needed
-- is dropped (the payload, the lease, the trace context, the input keys: nothing
-- runs the task again); the partition's stats count the transition under its
-- status (`redis-tasks inspect`). The task stops counting against its tenant: its
-- open-task quota (the record's `oq`) and, for a capped tenant (`tc`), its running
-- tasks, which may let a parked tenant back into the ring. A task with no work
-- entry waits in its tenant's queue: it leaves it (unqueue), so it no longer
-- counts as queued and no worker meets it.
-- The first write is HDEL, which a full Redis allows (HSET as the first write
-- would be refused): a worker still finishes what runs when Redis is full.
-- keys: {task, work, events, stats, and requests, issued, answers, journal where
--   known} (keys.lua's task_keys, by name)
-- t: the record as read_record or read_all read it, with at least `wk`, `ua` (and so
--   `.updated`: see the DEL below), `tn`, `oq` and `tc`, and `pw` where the caller
--   may meet a parked task; `entry` the work entry
--   to acknowledge (the record's `wk`, or the one a claim met). The first
--   continuation piece of `pl`, `sm` and `tp` (`pl+1`, ...), when the caller read
--   it, says whether that field is pieced (false: it is not): only those pieces'
--   names go to the HDEL, which otherwise names 21 fields a task rarely has (7 us
--   a task). Of the fields it drops (DROPPED_AT_END), one the caller read and
--   found absent (false) is not named either.
-- ending: {status, message (nil for none), field ('rs', 'er' or nil), value}
-- call: what the script call shares: {now, now_text (int_text(now), made here when
--   absent), event_opts, outcomes}; outcomes is nil, or
--   finish_batch's {entries, direct, counts, ended}: the work entries to acknowledge,
--   the IDs whose lease leaves the lease set (direct claims), the statuses to count
--   and the IDs of the tasks ended, which that script then writes with one command
--   each for all its tasks (one event for them all).
local DROPPED_AT_END = {'pl', 'wk', 'ld', 'lo', 'tp', 'tn', 'oq', 'tc'}
local PIECED_AT_END = {'pl', 'sm', 'tp'}
local function terminate(keys, task_id, t, entry, ending, call)
  local task_key = keys.task
  local batch = call.outcomes
  -- The call's clock as text, made once: a batch's tasks mostly end at it.
  local now_text = call.now_text
  if not now_text then
    now_text = int_text(call.now)
    call.now_text = now_text
  end
  -- last_updated_at never goes backwards (next_update), compared here as text: both
  -- are whole ms written by int_text (no sign, no leading zero), so the longer is
  -- the later and of equal length the later sorts last; no tonumber (a strtod) a job.
  local last, updated_at = t.ua, now_text
  if last and (#last > #now_text or (#last == #now_text and last > now_text)) then
    updated_at = last
  end
  local fields = {'st', ending.status, 'ua', updated_at}
  if ending.message then
    add_field(fields, 'sm', ending.message)
  end
  if ending.field then
    add_field(fields, ending.field, ending.value)
  end
  -- Old pieces go before the new value lands: a shorter message must not be
  -- joined with the tail of a longer one.
  -- A field the caller read and found absent is not named: each name in an HDEL is
  -- a scan of the record's listpack, to its end for a field it does not hold.
  -- A field is absent when read and false, or unread and the record was read whole
  -- (`.whole`). The test is written out, not a function: eleven calls a job cost
  -- 2 % of a drained job (benchmarks/call_instructions.py, claims of 32).
  local dropped = {}
  local unread_is_absent = t.whole == true
  for i = 1, #DROPPED_AT_END do
    local name = DROPPED_AT_END[i]
    local value = t[name]
    if value or (value == nil and not unread_is_absent) then
      dropped[#dropped + 1] = name
    end
  end
  for i = 1, #PIECED_AT_END do
    local name = PIECED_AT_END[i]
    local value = t[pieces_of(name)[1]]
    if value or (value == nil and not unread_is_absent) then  -- unread: maybe pieced
      add_pieces(dropped, name)
    end
  end
  local sm = t.sm
  if not ending.message and (sm or (sm == nil and not unread_is_absent)) then
    dropped[#dropped + 1] = 'sm'
  end
  if not dropped[1] then
    dropped[1] = 'ld'  -- never empty: the HDEL is the first write (see above)
  end
  redis.call('HDEL', task_key, unpack(dropped))
  redis.call('HSET', task_key, unpack(fields))
  -- The input keys exist only for a task updated before: request_input writes its
  -- status (and so `ua`) whenever it makes them, and update needs what it made. A
  -- task that ran straight through (most do) has no `ua` and saves the DEL.
  if t.updated then
    redis.call('DEL', input_keys(keys))
  end
  if entry and batch then
    -- A direct claim's lease leaves the lease set, a stream entry the stream: one
    -- command each for the batch.
    if entry == DIRECT_ENTRY then
      batch.direct[#batch.direct + 1] = task_id
    else
      batch.entries[#batch.entries + 1] = entry
    end
  elseif entry then
    drop_entry(keys.work, entry, task_id)
  end
  local tenant = t.tn
  if tenant and not entry then
    -- Queued, or parked (waiting.lua): a caller that may meet a parked task reads
    -- `pw`; one that did not (an unfenced finish) finds it by its absence from the
    -- queue, so no finish reads a field more for it.
    local tag = tag_of(task_key, task_id)
    if t.pw or not unqueue(tag, tenant, task_id, keys.stats) then
      forget_waiting(tag, tenant, task_id)
      if t.pw ~= false then
        redis.call('HDEL', task_key, 'pw')
      end
    end
  end
  if tenant and (t.oq or t.tc) then
    local tag = tag_of(task_key, task_id)
    if t.oq then
      redis.call('ZREM', tag .. KEY_OPEN .. tenant, task_id)
    end
    if t.tc and entry then
      -- Only a task with a work entry may hold a running place: one that waited in
      -- its queue leaves its tenant, parked at its cap, parked (unparked, it was
      -- rung for and parked again at the next dispatch).
      release_tenant_slot(tag, tenant, task_id, call)
    end
  end
  if batch then
    batch.counts[ending.status] = (batch.counts[ending.status] or 0) + 1
  else
    redis.call('HINCRBY', keys.stats, ending.status, 1)
  end
  if batch then
    batch.ended[#batch.ended + 1] = task_id
  else
    emit(keys.events, call.event_opts, task_id)
  end
end

-- What a read of a long field's first piece `first` says of its continuation
-- pieces: false (none) when it is absent or not PIECE_BYTES long, else nil (not
-- known: there may be some).
local function unpieced(first)
  if not first or #first ~= PIECE_BYTES then
    return false
  end
  return nil
end

-- What finish does for one task, shared by finish and finish_batch (which finish
-- batch's tasks exactly as finish would, one by one): the checks in their order,
-- the answer to a retry, and the terminal write. `ending` as terminate() takes
-- it; `operation` is "" for a fenced call; `call` as terminate() takes it.
-- Returns the code and whether it wrote (a retry of a transition already applied
-- answers RC_OK and writes nothing).
-- keys: as terminate()'s
local function finish_task(keys, task_id, fence, ending, operation, call)
  -- Read as read_record would read these fields (none is a long one, so none is
  -- pieced), but into a table built whole: read_record's loop over the names cost
  -- a finish more than its fields' lookups (a job ends once, on the busy path).
  -- `tp` and `sm` themselves rather than their first continuation pieces: as
  -- cheap to read (short, mostly absent), and they tell more: an absent one is not
  -- dropped at all, and one not PIECE_BYTES long has no pieces. A payload may be
  -- long, so `pl+1` says whether it has pieces.
  local pl1, tp1, sm1 = pieces_of('pl')[1], pieces_of('tp')[1], pieces_of('sm')[1]
  local task_key = keys.task
  local v = redis.call('HMGET', task_key, 'st', 'fn', 'ua', 'wk', 'tn', 'oq', 'tc', pl1, 'tp', 'sm',
    'ca')
  local t = {st = v[1], fn = v[2] or '0', ua = v[3] or v[11], updated = v[3] ~= false, wk = v[4],
    tn = v[5], oq = v[6], tc = v[7], [pl1] = v[8], tp = v[9], sm = v[10],
    [tp1] = unpieced(v[9]), [sm1] = unpieced(v[10])}
  local guard = worker_guard(t.st, t.fn, fence)
  if guard == RC_TERMINAL then
    -- The operation that ended the task is read only here: a task that ends is not
    -- terminal yet, and a field asked for is a scan of the record.
    local op = redis.call('HGET', task_key, 'op')
    if operation ~= '' then
      if op == operation then
        confirm_state(task_key, 'st', t.st)
        return RC_OK, false  -- this very call again: a retry after a lost reply
      end
    elseif not op and t.st == ending.status then
      -- Only a retry compares what was written: the message and the outcome are
      -- read here, not for every finish.
      local done = read_record(task_key, 'sm', ending.field or 'st')
      if done.sm == (ending.message or false)
          and (not ending.field or done[ending.field] == ending.value) then
        confirm_state(task_key, 'st', t.st)
        return RC_OK, false  -- the lease holder's same transition again (fence checked above)
      end
    end
  end
  if guard ~= RC_OK then
    return guard, false
  end
  terminate(keys, task_id, t, t.wk, ending, call)
  return RC_OK, true
end
