"""Consumer groups on the outcome streams: their scripts' calls, reading and
settling (streams), one consumer's reader, the operator's side and the dead letters.
Over ``model`` only."""
