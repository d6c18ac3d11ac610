-- Shared helpers. The loader inlines this file (after the constants it generates
-- from Python: RC_*, ST_*, TERMINAL, WORK_GROUP, KEY_*, LONG_FIELDS, PIECE_BYTES,
-- MAX_PIECES, PICKUP_*...) into every script, so each command stays one script with one SHA.

-- Milliseconds on the Redis server's clock: every timestamp comes from here,
-- never from a client, so all nodes agree on one clock.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Microseconds on the same clock (the create rate's GCRA counts in them).
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
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

-- Long values are kept in pieces, so the record stays a listpack. A hash
-- holding one value longer than hash-max-listpack-value (64 bytes by default)
-- becomes a hashtable, about twice the memory for the same fields; a typical
-- origin (a tool name and its arguments) is longer than that. A value of one
-- of LONG_FIELDS of PIECE_BYTES + 1 to PIECE_BYTES * MAX_PIECES bytes is stored
-- as `<field>` (the first PIECE_BYTES bytes), `<field>+1`, `<field>+2`...;
-- shorter and longer values are stored whole (a record holding a value that
-- long is a hashtable whatever we do, and pieces would only add fields to it).
-- So a stored first piece of exactly PIECE_BYTES bytes may have more, and any
-- other length has none. (All three come from redis_tasks/_record/fields.py.)

-- The field names of `name`'s continuation pieces, `<name>+1` to `<name>+7`, made
-- once per script call: a batch's tasks share them (making them per task, with
-- three long fields dropped at each terminal write, was measured at 7 us a task).
local piece_names = {}
local function pieces_of(name)
  local names = piece_names[name]
  if not names then
    names = {}
    for n = 1, MAX_PIECES - 1 do
      names[n] = name .. '+' .. n
    end
    piece_names[name] = names
  end
  return names
end

-- Those names (to read, drop or replace a value that may have been stored in
-- pieces), appended to `names`.
local function add_pieces(names, name)
  for _, piece in ipairs(pieces_of(name)) do
    names[#names + 1] = piece
  end
  return names
end

-- The whole value of the long field `name` of `key`, whose first piece `first` is
-- PIECE_BYTES long (so it may have more): its pieces read and joined.
local function join_pieces(key, name, first)
  local rest = redis.call('HMGET', key, unpack(add_pieces({}, name)))
  local parts = {first}
  for n = 1, #rest do
    if not rest[n] then
      break
    end
    parts[n + 1] = rest[n]
  end
  return table.concat(parts)
end

-- HMGET of the record fields `...` of `key`, asking for `ca` too when `ua` is
-- asked for (in the same call: a missing `ua` costs no command): the names, the
-- reply, how many fields were asked for, and where `ca` came back (or nil). The
-- request hmget and read_record share; each reads the reply in its own loop (one
-- shared per-field function cost them 0.2 to 0.3 us a record: EVAL loops).
local function hmget_reply(key, ...)
  local names = {...}
  local count = #names
  local created = nil
  for i = 1, count do
    if names[i] == 'ua' then
      created = count + 1
      names[created] = 'ca'
      break
    end
  end
  return names, redis.call('HMGET', key, unpack(names)), count, created
end

-- HMGET that joins pieces: the values of `...` in `key`, false where absent.
-- Two fields a create leaves out read as what they stand for: `fn` as 0 (never
-- claimed) and `ua` as `ca` (never updated); every byte of a record is kept for
-- its whole retention. When `ua` is asked for, `.updated` says whether it was
-- stored (the task changed after its create).
local function hmget(key, ...)
  local names, values, count, created = hmget_reply(key, ...)
  local updated = false
  for i = 1, count do
    local first = values[i]
    if not first then
      if names[i] == 'fn' then
        values[i] = '0'
      elseif names[i] == 'ua' then
        values[i] = values[created]
      end
    elseif names[i] == 'ua' then
      updated = true
    elseif #first == PIECE_BYTES and LONG_FIELDS[names[i]] then
      values[i] = join_pieces(key, names[i], first)
    end
  end
  if created then
    values[created] = nil
    values.updated = updated
  end
  return values
end

-- A record's fields `...` by name (`t.st`, `t.ld`), read as hmget reads them:
-- pieces joined, false where absent, `fn` as 0 and `ua` as `ca` when absent, and
-- `.updated` when `ua` is asked for. What a script decides on reads by name; only a
-- reply that lists fields in order (find, inspect) reads them by number. One pass
-- over the reply into the named table (through hmget, a second table and a second
-- pass cost 1.1 us a record more: measured with EVAL loops).
local function read_record(key, ...)
  local names, values, count, created = hmget_reply(key, ...)
  local t = {updated = false}
  for i = 1, count do
    local name, value = names[i], values[i]
    if not value then
      if name == 'fn' then
        value = '0'
      elseif name == 'ua' then
        value = values[created]
      end
    elseif name == 'ua' then
      t.updated = true
    elseif #value == PIECE_BYTES and LONG_FIELDS[name] then
      value = join_pieces(key, name, value)
    end
    t[name] = value
  end
  return t
end

-- The whole record of `key` by name, as read_record reads fields (`fn` as 0, `ua`
-- as `ca` when absent, `.updated`), from one HGETALL, with `.whole` set: a field it
-- lacks is absent (false or nil), not unread. The long fields named in `joined` are joined
-- from their pieces (the others' pieces stay as they are). For a caller that needs most
-- of a record: each field HMGET asks for is a scan of the record's listpack, to its
-- end for one it does not hold, where HGETALL walks it once (a claim asked for 13,
-- most of them absent on a first claim).
local function read_all(key, joined)
  local flat = redis.call('HGETALL', key)
  -- Built with the fields a claimed record mostly has (false: absent, as nil is
  -- here), so filling it grows no table: four rehashes a record otherwise.
  local t = {whole = true, updated = false, st = false, ca = false, ttl = false, pi = false,
    bd = false, tn = false, wk = false, ['or'] = false, ex = false, fn = false, at = false,
    lo = false, ld = false, ua = false}
  for i = 1, #flat - 1, 2 do
    t[flat[i]] = flat[i + 1]
  end
  if not t.fn then
    t.fn = '0'
  end
  if t.ua then
    t.updated = true
  else
    t.ua = t.ca
  end
  for i = 1, #joined do
    local name = joined[i]
    local first = t[name]
    if first and #first == PIECE_BYTES then
      local parts = {first}
      for _, piece in ipairs(pieces_of(name)) do
        local part = t[piece]
        if not part then
          break
        end
        parts[#parts + 1] = part
      end
      t[name] = table.concat(parts)
    end
  end
  return t
end

-- Append `name`, `value` to an HSET argument list, in pieces when it is long.
local function add_field(fields, name, value)
  local size = #value
  if size <= PIECE_BYTES or size > PIECE_BYTES * MAX_PIECES then
    fields[#fields + 1] = name
    fields[#fields + 1] = value
    return
  end
  fields[#fields + 1] = name
  fields[#fields + 1] = string.sub(value, 1, PIECE_BYTES)
  local pieces, n, at = pieces_of(name), 1, PIECE_BYTES + 1
  while at <= size do
    fields[#fields + 1] = pieces[n]
    fields[#fields + 1] = string.sub(value, at, at + PIECE_BYTES - 1)
    n, at = n + 1, at + PIECE_BYTES
  end
end

-- Set (`value`) or remove (`value` nil) the long field `name`, whose current
-- value as hmget joined it is `current`: the pieces of a current value go at
-- once, the new value is appended to the HSET list `fields` for the caller.
local function set_long(key, fields, name, value, current)
  if current and #current > PIECE_BYTES and #current <= PIECE_BYTES * MAX_PIECES then
    redis.call('HDEL', key, unpack(add_pieces({}, name)))
  end
  if value then
    add_field(fields, name, value)
  elseif current then
    redis.call('HDEL', key, name)
  end
end

-- The status write of a live task: `status` with the status message `message`
-- (nil: none) in place of `current_message` (as hmget joined it), and
-- last_updated_at advanced from `last_update`, in one HSET (after the HDEL of
-- the old message's pieces, if it had any).
local function write_status(task_key, status, message, current_message, last_update)
  local fields = {'st', status, 'ua', int_text(next_update(now_ms(), last_update))}
  set_long(task_key, fields, 'sm', message, current_message)
  redis.call('HSET', task_key, unpack(fields))
end

-- One event on the partition's bounded event stream: the task IDs `task_ids`
-- (one, or a batch's, separated by spaces) in one entry's `t`. `event_opts` is the
-- stream's MAXLEN, followed by "p" when the event is also published on the
-- stream's shard channel (named like the stream, so in its slot) as one line,
-- `<entry ID> <task IDs>`: on a cluster that is how tails learn of changes without
-- one blocking read per partition. The stream stays the record; pcall, since a
-- lost wake-up is allowed. The options are parsed once per script call.
-- A batch script ends many tasks and emits once for them all (finish_batch): an
-- XADD a task cost more Redis work than any other part of its event, and on a
-- cluster each SPUBLISH is also a cluster-bus message to every replica of the
-- shard, with a header of about 2 KiB.
local parsed_event_opts = {}
local function emit(events_key, event_opts, task_ids)
  local opts = parsed_event_opts[event_opts]
  if not opts then
    local maxlen, publish = string.match(event_opts, '^(%d+)(p?)$')
    opts = {maxlen, publish == 'p'}
    parsed_event_opts[event_opts] = opts
  end
  local id = redis.call('XADD', events_key, 'MAXLEN', '~', opts[1], '*', 't', task_ids)
  if opts[2] then
    redis.pcall('SPUBLISH', events_key, id .. ' ' .. task_ids)
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

-- The answer to a call that finds its work done already (a retry after a lost
-- reply; a change another call made) writes nothing of its own, and the WAIT that
-- confirms it (wait_replicas) covers only the writes of its connection: after a
-- lost reply, a new connection that has written nothing, so that WAIT answered at
-- once, "confirmed", whatever the replicas held. Rewriting one field of the record
-- with the value it holds changes nothing, but is replicated after the write that
-- made that state, so the answer's WAIT covers the state it reports. Only on those
-- paths (rare). Under pcall: a full Redis refuses a first write, and the answer
-- then stands unconfirmed as before rather than failing.
local function confirm_state(task_key, field, value)
  redis.pcall('HSET', task_key, field, value)
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

-- The partition's lease set, next to its work stream: the tasks a batch claim took
-- straight from their tenant's queue (their `wk` is DIRECT_ENTRY), by deadline.
local function leases_of(work_key)
  return string.sub(work_key, 1, #work_key - #KEY_WORK) .. KEY_LEASES
end

-- Let go of the work `entry` of `task_id`, which will never run under it: a stream
-- entry is acknowledged and deleted, a direct claim's lease leaves the lease set.
local function drop_entry(work_key, entry, task_id)
  if entry == DIRECT_ENTRY then
    redis.call('ZREM', leases_of(work_key), task_id)
    return
  end
  redis.pcall('XACK', work_key, WORK_GROUP, entry)
  redis.call('XDEL', work_key, entry)
end
