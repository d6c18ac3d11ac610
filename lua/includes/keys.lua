-- Key names and task IDs, as redis_tasks/_redis/keys.py and redis_tasks/_ids.py
-- make them, from the constants the loader generates from those modules
-- (KEY_*, TASK_ID_PATTERN, RANDOM_CHARS, PARTITION_DIGITS, MAX_PARTITIONS).

-- Whether `task_id` is a task ID that parse_task_id accepts. TASK_ID_PATTERN checks the form and captures the partition; a Lua pattern has
-- neither alternatives nor counted repeats, so the random part's length, the
-- partition's lack of a leading zero and its bound are checked here.
local function is_task_id(task_id)
  local partition = string.match(task_id, TASK_ID_PATTERN)
  if not partition or #partition > PARTITION_DIGITS
      or #task_id ~= #partition + 1 + RANDOM_CHARS then
    return false
  end
  if #partition > 1 and string.sub(partition, 1, 1) == '0' then
    return false
  end
  return tonumber(partition) < MAX_PARTITIONS
end

-- The record key of the task `task_id` of the partition tagged `tag`, as
-- KeySpace.task names it.
local function record_key(tag, task_id)
  return tag .. KEY_TASK .. task_id
end

-- The keys of that task, as terminate() and claim_entry() take them by name:
-- {task, work, events, stats}, and {requests, issued, answers, journal} where a
-- script was given them (its KEYS); left out here, input_keys() makes them when a
-- task has input. Most tasks never do, and four key names a task are four strings
-- Lua makes and later collects (a batch script makes them for every task it meets).
local function task_keys(tag, task_id, work_key, events_key, stats_key)
  return {task = record_key(tag, task_id), work = work_key, events = events_key,
    stats = stats_key}
end

-- The keys of the one task a script declares first in its KEYS, by name: a
-- script that calls this declares task, requests, issued, answers, journal, work,
-- events, stats as its KEYS 1 to 8, in that order (the loader refuses one that does
-- not: lua_header.LEADING_TASK_KEYS).
local function leading_task_keys()
  return {task = KEYS[1], requests = KEYS[2], issued = KEYS[3], answers = KEYS[4],
    journal = KEYS[5], work = KEYS[6], events = KEYS[7], stats = KEYS[8]}
end

-- The input keys (requests, issued, answers, journal) of the task whose keys are
-- `keys`: a script's own, or made from the record key where task_keys left them out.
local function input_keys(keys)
  local base = keys.task
  return keys.requests or base .. KEY_REQUESTS, keys.issued or base .. KEY_ISSUED,
    keys.answers or base .. KEY_ANSWERS, keys.journal or base .. KEY_JOURNAL
end

-- The tag of the partition a task's record key `task_key` lives in (the key is
-- the tag, KEY_TASK, then the task ID): how a script that was given a task's
-- keys names its partition's tenant keys.
local function tag_of(task_key, task_id)
  return string.sub(task_key, 1, #task_key - #KEY_TASK - #task_id)
end

-- The partition number (as text) of the tag `tag` ({<prefix>:<partition>.<salt>}).
local function tag_partition(tag)
  return string.match(tag, ':(%d+)%.%d+}$')
end

-- What every task ID of the partition tagged `tag` starts with: '<partition>.'.
local function id_prefix_of(tag)
  return tag_partition(tag) .. '.'
end

-- Whether `task_id`, which the manager parsed (parse_task_id) before it sent it, is
-- one of the partition whose IDs start with `prefix` (id_prefix_of): by its prefix
-- and its length, not its every character (is_task_id, for IDs Redis holds, cost 1 %
-- of a drained job where finish_batch ran it, and 3 % of a create).
local function of_partition(task_id, prefix)
  return string.sub(task_id, 1, #prefix) == prefix and #task_id == #prefix + RANDOM_CHARS
end
