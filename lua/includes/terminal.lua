-- terminate(), the one terminal write, for finish and claim; finish_task(), finish's
-- decision and write for one task, for finish and finish_batch.
-- Includes: common, keys, tenants

-- The one terminal write, shared by finish and claim (cancelled or poisoned at
-- claim). Outcome and terminal status land together; the work entry is
-- acknowledged and deleted; data no longer needed is dropped (the payload, the
-- lease, the trace context, the input keys: nothing runs the task again); the
-- partition's stats count the transition under its status (`redis-tasks inspect`). The
-- task stops counting against its tenant: its open-task quota (`account[2]`,
-- the record's `oq`) and, for a capped tenant (`account[3]`, `tc`), its running
-- tasks, which may let a parked tenant back into the ring. A task with no work
-- entry waits in its tenant's queue: it leaves it (unqueue), so it no longer
-- counts as queued and no worker meets it.
-- The first write is HDEL, which a full Redis allows (HSET as the first write
-- would be refused): a worker still finishes what runs when Redis is full.
-- keys: {task, requests, issued, answers, journal, work, events, stats}
-- account: the record's {tn, oq, tc} (each false when absent)
-- updated: whether the record stored `ua` (hmget's `.updated`): see the DEL below
-- pieced: nil, or which of the dropped long fields (pl, tp, sm) may be stored in
-- pieces, as the caller learned from reading their first continuation piece
-- (`<field>+1`, there iff the value was pieced): only those pieces' names go to
-- the HDEL, which otherwise names 21 fields a task rarely has (7 us a task).
-- batch: nil, or finish_batch's shared state {now, entries, counts, hints}: the
-- clock read once for the whole call, and the work entries to acknowledge, the
-- statuses to count and the hints to publish, which that script then writes with
-- one command each for all its tasks.
local function terminate(keys, task_id, entry, last_update, updated, status, message,
                         outcome_field, outcome, event_opts, account, pieced, batch)
  local task_key = keys[1]
  local now = batch and batch.now or now_ms()
  local fields = {'st', status, 'ua', int_text(next_update(now, last_update))}
  if message then
    add_field(fields, 'sm', message)
  end
  if outcome_field ~= '' then
    add_field(fields, outcome_field, outcome)
  end
  -- Old pieces go before the new value lands: a shorter message must not be
  -- joined with the tail of a longer one.
  local dropped = {'pl', 'wk', 'ld', 'lo', 'tp', 'tn', 'oq', 'tc'}
  for _, name in ipairs({'pl', 'sm', 'tp'}) do
    if not pieced or pieced[name] then
      add_pieces(dropped, name)
    end
  end
  if not message then
    dropped[#dropped + 1] = 'sm'
  end
  redis.call('HDEL', task_key, unpack(dropped))
  redis.call('HSET', task_key, unpack(fields))
  -- The input keys exist only for a task updated before: request_input writes its
  -- status (and so `ua`) whenever it makes them, and update needs what it made. A
  -- task that ran straight through (most do) has no `ua` and saves the DEL.
  if updated then
    redis.call('DEL', keys[2], keys[3], keys[4], keys[5])
  end
  if entry and batch then
    batch.entries[#batch.entries + 1] = entry
  elseif entry then
    -- pcall: an operator may have deleted the group; the entry goes regardless.
    redis.pcall('XACK', keys[6], WORK_GROUP, entry)
    redis.call('XDEL', keys[6], entry)
  end
  local tenant = account[1]
  if tenant and not entry then
    unqueue(tag_of(task_key, task_id), tenant, task_id, keys[8])
  end
  if tenant and (account[2] or account[3]) then
    local tag = tag_of(task_key, task_id)
    if account[2] then
      redis.call('ZREM', tag .. KEY_OPEN .. tenant, task_id)
    end
    if account[3] then
      release_tenant_slot(tag, tenant, task_id)
    end
  end
  if batch then
    batch.counts[status] = (batch.counts[status] or 0) + 1
  else
    redis.call('HINCRBY', keys[8], status, 1)
  end
  emit(keys[7], event_opts, task_id, batch and batch.hints)
end

-- What finish does for one task, shared by finish and finish_batch (which finish
-- batch's tasks exactly as finish would, one by one): the checks in their order,
-- the answer to a retry, and the terminal write. `message` is nil when none is
-- given; `operation` is "" for a fenced call; `batch` as terminate() takes it.
-- Returns the code and whether it wrote (a retry of a transition already applied
-- answers RC_OK and writes nothing).
-- keys: as terminate()'s
local function finish_task(keys, task_id, fence, status, message, outcome_field, outcome,
                           operation, event_opts, batch)
  local t = hmget(keys[1], 'st', 'fn', 'ua', 'wk', 'op', 'tn', 'oq', 'tc',
    pieces_of('pl')[1], pieces_of('tp')[1], pieces_of('sm')[1])
  local guard = worker_guard(t[1], t[2], fence)
  if guard == RC_TERMINAL then
    if operation ~= '' then
      if t[5] == operation then
        return RC_OK, false  -- this very call again: a retry after a lost reply
      end
    elseif not t[5] and t[1] == status then
      -- Only a retry compares what was written: the message and the outcome are
      -- read here, not for every finish.
      local done = hmget(keys[1], 'sm', outcome_field ~= '' and outcome_field or 'st')
      if done[1] == (message or false) and (outcome_field == '' or done[2] == outcome) then
        return RC_OK, false  -- the lease holder's same transition again (fence checked above)
      end
    end
  end
  if guard ~= RC_OK then
    return guard, false
  end
  terminate(keys, task_id, t[4], t[3], t.updated, status, message, outcome_field, outcome,
    event_opts, {t[6], t[7], t[8]}, {pl = t[9], tp = t[10], sm = t[11]}, batch)
  return RC_OK, true
end
