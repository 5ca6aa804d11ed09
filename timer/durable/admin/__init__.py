"""The operator's side: a namespace made and converted (setup), what a server is
asked before writing, views, the per-minute history, and the search of outcomes. It may
import any other part of ``timer.durable``."""
