"""The dispatcher's task graphs in the knowledge graph: DAG rules (`dag`), reads and writes of
graphs, tasks and sessions (`graph_reads`, `graph_writes`) and the feed of graph changes
that wakes the loop and WatchTaskGraph (`graph_feed`). May use the dispatcher's models and
store and the library; never the servicer.
"""
