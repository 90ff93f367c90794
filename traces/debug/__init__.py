"""Tools for finding out what happened in a run: comparing two runs step by step (``compare``,
with what their contents say differently in ``compare_contents``; ``compare_selectors``,
``compare_views``) and the cancellation audit, which says what a stop cut (``audit``)."""
