"""The agent runtime: plain, typed, async Python.

Nothing here imports Django or any of the project's apps; the apps call into the runtime, never
the other way round. Import names from the module that defines them (``agents.runtime.loop``,
``agents.runtime.messages``, …); this package re-exports nothing, so importing one runtime
module does not pull in the loop and everything it depends on.
"""
