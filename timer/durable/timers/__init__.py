"""A timer's operations: its gate, the client's scripts' calls, the clients'
operations, and finding timers by pattern, state and deadline. Over ``model`` only."""
