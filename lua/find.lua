--[[
  find: authorize a client against the task's binding and return its snapshot.
  Unknown and unauthorized tasks run the same command (EXISTS on a grant key that
  does not exist) and give the same reply.

  Includes: common

  KEYS:
    1 task           the task record hash
    2 requests       outstanding input requests
    3 grant          the grant key of (task ID, endpoint, binding)
  ARGV:
    1 binding        the record's digest of (task ID, endpoint, partition binding)
    2 confirm        '1': a snapshot that ends the task or asks for input is written
                     over as it stands (HSET of its status to itself), so that the
                     caller's WAIT covers what it read; '0': read only
  Returns:
    {RC_OK, {st, sm, ca, ua, ttl, pi, or, rs, er, md}, {req_key, kind..body, ...}}
    {RC_NOT_FOUND}   unknown, expired or unauthorized
  Events: none.
]]
local task_key = KEYS[1]
local requests_key = KEYS[2]
local grant_key = KEYS[3]
local binding = ARGV[1]
local confirm = ARGV[2] == '1'

if not granted(grant_key) then
  return {RC_NOT_FOUND}
end
local t = hmget(
  task_key, 'st', 'sm', 'ca', 'ua', 'ttl', 'pi', 'or', 'rs', 'er', 'md', 'bd')
-- The record's own binding, checked again: a grant never outlives its record
-- (both expire together), but a stale one must not open a record rebound since.
if t[11] ~= binding then
  return {RC_NOT_FOUND}
end
t[11] = nil
local requests = {}
local status = t[1]
if status == ST_INPUT_REQUIRED then
  requests = redis.call('HGETALL', requests_key)
end
if confirm and (status == ST_INPUT_REQUIRED or TERMINAL[status]) then
  -- A write after the read: only a command that propagates moves the offset a
  -- connection's WAIT waits for (Redis 8.2, Valkey), and a replica that confirms
  -- it holds everything this call read.
  redis.call('HSET', task_key, 'st', status)
end
return {RC_OK, t, requests}
