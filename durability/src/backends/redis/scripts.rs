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

/// Applies a list of compare-and-set and delete operations, in order.
///
/// `KEYS[1]` the scope's version counter, `KEYS[2]`/`KEYS[3]` the idx1/idx2 sets,
/// `KEYS[3 + n]` the record of op `n`. `ARGV`, 8 per op: kind (`c` or `d`), expected version
/// (`''` = must not exist), nonce, value, idx1, idx1 member (`''` = none), idx2, idx2 member.
/// Replies one `{status, version}` per op: `ok` with the new (or removed) version, `conflict`
/// with the current version or `''`. A create/replace whose stored nonce is its own is the same
/// write retried after a lost reply, and answers `ok`.
const WRITE: &str = r#"
local out = {}
for n = 1, #KEYS - 3 do
  local rec = KEYS[3 + n]
  local a = (n - 1) * 8
  local kind, expected, nonce = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  local cur = redis.call('HMGET', rec, 'v', 'w', 'm1', 'm2')
  local version = cur[1]
  if kind == 'c' then
    local matches
    if expected == '' then matches = not version else matches = (version == expected) end
    if matches then
      if cur[3] then redis.call('ZREM', KEYS[2], cur[3]) end
      if cur[4] then redis.call('ZREM', KEYS[3], cur[4]) end
      local v = string.format('%d', redis.call('INCR', KEYS[1]))
      redis.call('DEL', rec)
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
"#;

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

/// The write script.
pub(super) static WRITE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(WRITE));
/// The range script.
pub(super) static RANGE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RANGE));
