"""The executor's port to the model: the client it calls through (`model_client`), the
request built for a step (`model_request`), outage handling (`outages`), fallback models when
a quota is in the way (`fallback`), project budgets and costs (`budgets`), and quota waits
made visible on the run (`quota_waits`). May use the executor's values and store and the
library's `llm`; never a servicer.
"""
