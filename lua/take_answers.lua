--[[
  take_answers: a worker takes the answers clients gave since it last took
  them. They stay in the journal, so a replacement worker can replay them.

  Includes: common

  KEYS:
    1 task           the task record hash
    2 answers        accepted answers not yet taken
  ARGV:
    1 fence          "" for unfenced
  Returns:
    {RC_OK, {key, answer, ...}}
    {RC_NOT_FOUND} | {RC_LEASE_LOST} | {RC_TERMINAL}
  Events: none (nothing a client sees changes).
]]
local task_key = KEYS[1]
local answers_key = KEYS[2]
local fence = ARGV[1]

local t = read_record(task_key, 'st', 'fn')
local guard = worker_guard(t.st, t.fn, fence)
if guard ~= RC_OK then
  return {guard}
end
local answers = redis.call('HGETALL', answers_key)
if #answers > 0 then
  redis.call('DEL', answers_key)
end
return {RC_OK, answers}
