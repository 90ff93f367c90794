"""Prices and money. The price table and how a model request finds its price (``pricing``; new
versions, import and export: ``price_services``; seeded from the model catalogue: ``catalogue``,
``price_seed``), the cost roll-ups kept beside the steps (``rollups``), re-pricing a trace or a
range (``repricing``), budgets (``budgets``), the costs page with its reads and charts
(``selectors``, ``views``, ``charts``, ``urls``), and the prompt-cache explainer, which says what
the cache saved or lost (``cache``, ``cache_selectors``, ``cache_views``)."""
