"""A service process's lifecycle: start, serve and stop (`service_runtime`), the signals that
stop it gracefully (`stop_signals`), and the process hardening applied at start
(`hardening`). May use every library package; never a service.
"""
