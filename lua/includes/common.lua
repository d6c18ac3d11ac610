-- Shared helpers. The loader inlines this file (after the generated constants
-- RC_*, TERMINAL and WORK_GROUP) into every script, so each command stays one
-- script with one SHA.

-- Milliseconds on the Redis server's clock: every timestamp comes from here,
-- never from a client, so all nodes agree on one clock.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Integers as decimal text; tostring() would switch to exponent notation.
local function int_text(n)
  return string.format('%d', n)
end

-- last_updated_at never goes backwards, even if the server clock does.
local function next_update(now, last)
  local previous = tonumber(last) or 0
  if now > previous then
    return now
  end
  return previous
end

-- One task-ID hint on the partition's bounded event stream. `events` is the
-- stream's MAXLEN, followed by "p" when the hint is also published on the
-- stream's shard channel (named like the stream, so in its slot): on a cluster
-- that is how tails learn of changes without one blocking read per partition.
-- The stream stays the record; pcall, since a lost wake-up is allowed.
local function emit(events_key, events, task_id)
  local maxlen, publish = string.match(events, '^(%d+)(p?)$')
  local id = redis.call('XADD', events_key, 'MAXLEN', '~', maxlen, '*', 't', task_id)
  if publish == 'p' then
    redis.pcall('SPUBLISH', events_key, id .. ' ' .. task_id)
  end
end

-- A client may see a task iff the grant key named by its binding's digest
-- exists (create stores it). Unknown and unauthorized then do the same work:
-- one lookup of a key that does not exist. Comparing the record's own binding
-- fields instead looked up an existing hash for an unauthorized client, and
-- its latency told the two apart (benchmarks/timing_side_channel.py).
local function granted(grant_key)
  return redis.call('EXISTS', grant_key) == 1
end

-- Companion keys expire with their task, so nothing outlives it.
local function expire_with_task(key, expire_at)
  if expire_at then
    redis.call('PEXPIREAT', key, expire_at)
  end
end

-- An empty fence argument means "unfenced"; a task never claimed has fence 0.
local function fence_matches(given, stored)
  return given == '' or given == (stored or '0')
end

-- The status checks every worker-side write starts with, in this order:
-- unknown, then stale fence (a zombie learns it lost its lease even if the new
-- owner already finished), then terminal.
local function worker_guard(status, stored_fence, given_fence)
  if not status then
    return RC_NOT_FOUND
  end
  if not fence_matches(given_fence, stored_fence) then
    return RC_LEASE_LOST
  end
  if TERMINAL[status] then
    return RC_TERMINAL
  end
  return RC_OK
end

-- The one terminal write, shared by finish and claim (cancelled or poisoned at
-- claim). Outcome and terminal status land together; the work entry is
-- acknowledged and deleted; data no longer needed is dropped.
-- keys: {task, requests, issued, answers, journal, work, events}
local function terminate(keys, task_id, entry, last_update, status, message,
                         outcome_field, outcome, events)
  local task_key = keys[1]
  local fields = {'st', status, 'ua', int_text(next_update(now_ms(), last_update))}
  if message then
    table.insert(fields, 'sm')
    table.insert(fields, message)
  end
  if outcome_field ~= '' then
    table.insert(fields, outcome_field)
    table.insert(fields, outcome)
  end
  redis.call('HSET', task_key, unpack(fields))
  if message then
    redis.call('HDEL', task_key, 'pl', 'wk', 'ld', 'lo')
  else
    redis.call('HDEL', task_key, 'pl', 'wk', 'ld', 'lo', 'sm')
  end
  redis.call('DEL', keys[2], keys[3], keys[4], keys[5])
  if entry then
    -- pcall: an operator may have deleted the group; the entry goes regardless.
    redis.pcall('XACK', keys[6], WORK_GROUP, entry)
    redis.call('XDEL', keys[6], entry)
  end
  emit(keys[7], events, task_id)
end

-- Acknowledge and delete a work entry that will never run.
local function drop_entry(work_key, entry)
  redis.pcall('XACK', work_key, WORK_GROUP, entry)
  redis.call('XDEL', work_key, entry)
end
