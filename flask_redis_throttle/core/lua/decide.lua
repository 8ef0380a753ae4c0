-- Layer `layer`'s verdict (fit, left, reset, retry: see main.lua) counts
-- towards the deciding layer: when refused, the full layer whose wait is
-- longest; when admitted, the one with the least quota left, the later
-- reset breaking ties. The general script and the flat ones include this
-- text where they decide each layer (see scripts.py): a function call per
-- layer would cost more than the comparisons.
if not fit then
  if admitted or retry > pick_retry then
    pick, pick_remaining, pick_reset, pick_retry = layer, left, reset, retry
  end
  admitted = false
elseif admitted and (pick == 0 or left < pick_remaining or (left == pick_remaining and reset > pick_reset)) then
  pick, pick_remaining, pick_reset, pick_retry = layer, left, reset, retry
end
