//! The Lua scripts of [`RedisKv`](super::RedisKv): every write, and every range read, is one
//! script, so it is atomic on the server.
//!
//! They run with `EVALSHA`; when Redis answers `NOSCRIPT` (after a restart, a failover or a
//! `SCRIPT FLUSH`) the `redis` crate's `Script` loads the source with `SCRIPT LOAD` and runs it
//! again. The scripts touch only keys of one scope's hash tag. Layout of one entry, a hash:
//! `v` version, `d` value, `w` nonce of the write that made this version, `i1`/`i2` index
//! values and `m1`/`m2` their sorted-set members (`escaped value \0 key`).

use std::sync::LazyLock;

use ::redis::Script;

/// The Lua function both write scripts store an entry with: the record `rec` gets version
/// `v`, the `nonce` of the write, and the value, indexes and index members of the op whose
/// arguments follow `ARGV[a]` (value `a + 4`, idx1 and its member `a + 5`/`a + 6`, idx2 and its
/// member `a + 7`/`a + 8`; an empty member: no index), added to the idx1/idx2 sets.
macro_rules! store_entry_lua {
    () => {
        r#"
local function store_entry(rec, v, nonce, a)
  local fields = {'v', v, 'w', nonce, 'd', ARGV[a + 4]}
  if ARGV[a + 6] ~= '' then
    table.insert(fields, 'i1'); table.insert(fields, ARGV[a + 5])
    table.insert(fields, 'm1'); table.insert(fields, ARGV[a + 6])
    redis.call('ZADD', KEYS[2], 0, ARGV[a + 6])
  end
  if ARGV[a + 8] ~= '' then
    table.insert(fields, 'i2'); table.insert(fields, ARGV[a + 7])
    table.insert(fields, 'm2'); table.insert(fields, ARGV[a + 8])
    redis.call('ZADD', KEYS[3], 0, ARGV[a + 8])
  end
  redis.call('HSET', rec, unpack(fields))
end
"#
    };
}

/// Applies a list of compare-and-set and delete operations, in order.
///
/// `KEYS[1]` the scope's version counter, `KEYS[2]`/`KEYS[3]` the idx1/idx2 sets,
/// `KEYS[3 + n]` the record of op `n`. `ARGV`, 10 per op: kind (`c`, `d`, or `g1`/`g2` for a
/// create guarded by the idx1/idx2 set), expected version (`''` = must not exist), nonce,
/// value, idx1, idx1 member (`''` = none), idx2, idx2 member, and a guarded create's range
/// (`ZRANGEBYLEX` min and max). Replies one `{status, version}` per op: `ok` with the new (or
/// removed) version, `conflict` with the current version or `''` (a guarded create whose range
/// lists a member answers `''`). A create/replace whose stored nonce is its own is the same
/// write retried after a lost reply, and answers `ok`.
const WRITE: &str = concat!(
    store_entry_lua!(),
    r#"
local out = {}
for n = 1, #KEYS - 3 do
  local rec = KEYS[3 + n]
  local a = (n - 1) * 10
  local kind, expected, nonce = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local cur = redis.call('HMGET', rec, 'v', 'w', 'm1', 'm2')
  local version = cur[1]
  if kind ~= 'd' then
    local matches
    if expected == '' then matches = not version else matches = (version == expected) end
    if matches and kind ~= 'c' then
      local set = KEYS[3]
      if kind == 'g1' then set = KEYS[2] end
      if #redis.call('ZRANGEBYLEX', set, ARGV[a + 9], ARGV[a + 10], 'LIMIT', 0, 1) > 0 then
        matches = false
      end
    end
    if matches then
      if cur[3] then redis.call('ZREM', KEYS[2], cur[3]) end
      if cur[4] then redis.call('ZREM', KEYS[3], cur[4]) end
      local v = string.format('%d', redis.call('INCR', KEYS[1]))
      redis.call('DEL', rec)
      store_entry(rec, v, nonce, a)
      out[n] = {'ok', v}
    elseif version and cur[2] == nonce then
      out[n] = {'ok', version}
    else
      out[n] = {'conflict', version or ''}
    end
  else
    if version and version == expected then
      if cur[3] then redis.call('ZREM', KEYS[2], cur[3]) end
      if cur[4] then redis.call('ZREM', KEYS[3], cur[4]) end
      redis.call('DEL', rec)
      out[n] = {'ok', version}
    else
      out[n] = {'conflict', version or ''}
    end
  end
end
return out
"#
);

/// Lists one index: `KEYS[1]` the sorted set; `ARGV` min, max (`ZRANGEBYLEX` syntax), limit,
/// and the record key prefix. Replies `{key, version, value, has_i1, i1, has_i2, i2}` per entry.
const RANGE: &str = r#"
local members = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, m in ipairs(members) do
  local sep = string.find(m, '\0', 1, true)
  if sep then
    local key = string.sub(m, sep + 1)
    local h = redis.call('HMGET', ARGV[4] .. key, 'v', 'd', 'i1', 'i2')
    if h[1] then
      table.insert(out, {key, h[1], h[2] or '', h[3] and '1' or '0', h[3] or '',
        h[4] and '1' or '0', h[4] or ''})
    end
  end
end
return out
"#;

/// Commits one flow step (see `RedisStore`'s `commit_step`): the journal operations all or
/// none, then the store's writes.
///
/// `KEYS[1..3]` and the first `10 n` arguments after `ARGV[1] = n` are the write script's (the
/// counter, the index sets, then op `i`'s record at `KEYS[3 + i]`). Every operation is checked
/// first, against the versions the operations before it produce (the counter's next values),
/// so a conflict anywhere writes nothing: it replies `{'conflict', i, current}` (`i` from 0,
/// `current` `''` when the key does not exist). A guarded create's range is checked against
/// the set as the operations before it leave it: a member of a record they rewrite or delete
/// does not count, a member they write does (compared byte by byte, as the set orders them). Then every operation is applied and each store
/// write runs: 4 arguments each (`kind, a, b, c`) on the next key, `hset` (field `a`, value
/// `b`), `hdel` (field `a`), `set` (`a`), `rpush` (`a`), or `chat` (`a` the new chat's JSON;
/// an existing chat keeps its JSON with `is_group` set to `b` and `last_activity_ms` to `c`).
/// Replies `{'ok', version…}`, the version written (or removed) by each operation. When the
/// first operation is a create/replace whose record already holds its nonce, the script ran
/// before (this is a retry after a lost reply): it writes nothing and replies `ok` with the
/// versions found.
const STEP: &str = concat!(
    store_entry_lua!(),
    r#"
-- Whether `x` sorts before `y` byte by byte (Lua's own `<` follows the server's locale).
local function below(x, y)
  for i = 1, math.min(#x, #y) do
    local p, q = string.byte(x, i), string.byte(y, i)
    if p ~= q then return p < q end
  end
  return #x < #y
end
-- Whether op `i`'s guarded range lists a member, the operations before it applied.
local function listed(i)
  local a = 1 + (i - 1) * 10
  local set, field, off = KEYS[3], 'm2', 8
  if ARGV[a + 1] == 'g1' then set, field, off = KEYS[2], 'm1', 6 end
  local min, max = ARGV[a + 9], ARGV[a + 10]
  local lo, hi = string.sub(min, 2), string.sub(max, 2)
  local hidden = {}
  for j = 1, i - 1 do
    local m = redis.call('HGET', KEYS[3 + j], field)
    if m then hidden[m] = true end
    local b = 1 + (j - 1) * 10
    local written = ARGV[b + off]
    if ARGV[b + 1] ~= 'd' and written ~= '' and not below(written, lo) and below(written, hi) then
      return true
    end
  end
  for _, m in ipairs(redis.call('ZRANGEBYLEX', set, min, max, 'LIMIT', 0, i)) do
    if not hidden[m] then return true end
  end
  return false
end
local n = tonumber(ARGV[1])
if n > 0 and ARGV[2] ~= 'd' and redis.call('HGET', KEYS[4], 'w') == ARGV[4] then
  local out = {'ok'}
  for i = 1, n do
    local a = 1 + (i - 1) * 10
    if ARGV[a + 1] ~= 'd' then
      table.insert(out, redis.call('HGET', KEYS[3 + i], 'v') or '')
    else
      table.insert(out, ARGV[a + 2])
    end
  end
  return out
end
local counter = redis.call('GET', KEYS[1])
counter = counter and tonumber(counter) or 0
local seen = {}
for i = 1, n do
  local rec = KEYS[3 + i]
  local a = 1 + (i - 1) * 10
  local kind, expected = ARGV[a + 1], ARGV[a + 2]
  local version = seen[rec]
  if version == nil then version = redis.call('HGET', rec, 'v') end
  local matches
  if kind ~= 'd' and expected == '' then
    matches = not version
  else
    matches = version and version == expected
  end
  if not matches then return {'conflict', tostring(i - 1), version or ''} end
  if kind ~= 'c' and kind ~= 'd' and listed(i) then return {'conflict', tostring(i - 1), ''} end
  if kind ~= 'd' then
    counter = counter + 1
    seen[rec] = string.format('%d', counter)
  else
    seen[rec] = false
  end
end
local out = {'ok'}
for i = 1, n do
  local rec = KEYS[3 + i]
  local a = 1 + (i - 1) * 10
  local cur = redis.call('HMGET', rec, 'm1', 'm2')
  if cur[1] then redis.call('ZREM', KEYS[2], cur[1]) end
  if cur[2] then redis.call('ZREM', KEYS[3], cur[2]) end
  redis.call('DEL', rec)
  if ARGV[a + 1] ~= 'd' then
    local v = string.format('%d', redis.call('INCR', KEYS[1]))
    store_entry(rec, v, ARGV[a + 3], a)
    table.insert(out, v)
  else
    table.insert(out, ARGV[a + 2])
  end
end
local k = 3 + n
local t = 1 + n * 10
while t + 4 <= #ARGV do
  k = k + 1
  local kind, x = ARGV[t + 1], ARGV[t + 2]
  if kind == 'hset' then
    redis.call('HSET', KEYS[k], x, ARGV[t + 3])
  elseif kind == 'hdel' then
    redis.call('HDEL', KEYS[k], x)
  elseif kind == 'set' then
    redis.call('SET', KEYS[k], x)
  elseif kind == 'rpush' then
    redis.call('RPUSH', KEYS[k], x)
  elseif kind == 'chat' then
    local merged = x
    local cur = redis.call('GET', KEYS[k])
    if cur then
      local m, c1 = string.gsub(cur, '"is_group":%a+', '"is_group":' .. ARGV[t + 3], 1)
      local m2, c2 = string.gsub(m, '"last_activity_ms":%-?%d+', '"last_activity_ms":' .. ARGV[t + 4], 1)
      if c1 == 1 and c2 == 1 then merged = m2 end
    end
    redis.call('SET', KEYS[k], merged)
  end
  t = t + 4
end
return out
"#
);

/// The write script.
pub(super) static WRITE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(WRITE));
/// The step script.
pub(super) static STEP_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(STEP));
/// The range script.
pub(super) static RANGE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RANGE));
