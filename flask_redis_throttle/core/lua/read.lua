-- A flat script's read of layer `name`'s record in `value`, each record
-- SIZE bytes and packed as RECORD with two fields after the window. The
-- fixed-window and GCRA flat scripts include this text where they read a
-- layer (see scripts.py): it looks where the last record read ended, `at`,
-- first, with one unpack and no call, as the usual request's records are
-- in its plan's order; only then anywhere, with locate() (records.lua).
-- `found` is the record's window (nil for none), `a` and `b` its fields,
-- and `at` moves on past it if it was where it was looked for first.
local found, a, b
if at <= #value - SIZE + 1 then
  found, a, b = unpack_bytes(RECORD, value, at)
end
if found == name then
  at = at + SIZE
else
  found, at = locate(value, at, name, SIZE)
  if found then
    found, a, b = unpack_bytes(RECORD, value, found)
  end
end
