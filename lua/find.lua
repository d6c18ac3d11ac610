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
  Returns:
    {RC_OK, {st, sm, ca, ua, ttl, pi, or, rs, er, md}, {req_key, kind..body, ...}}
    {RC_NOT_FOUND}   unknown, expired or unauthorized
  Events: none.
]]
local task_key = KEYS[1]
local requests_key = KEYS[2]
local grant_key = KEYS[3]
local binding = ARGV[1]

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
if t[1] == ST_INPUT_REQUIRED then
  requests = redis.call('HGETALL', requests_key)
end
return {RC_OK, t, requests}
