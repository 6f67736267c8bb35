"""The dashboard: a read-only view over a source (files, the live cache, a simulation result) and its JSON API.

:mod:`.contract` is the boundary (the data source protocol and the views); :mod:`.source_files`,
:mod:`.source_live` and :mod:`.source_simulation` fill it; :mod:`.api` answers the JSON API from it;
:mod:`.server` serves the API, the pages (``static/``) and server-sent events. :mod:`.whatif` checks and answers
what the what-if page shows beside a result's runs (an advice, a calibration's fit), against schemas that
:mod:`.schema_check` holds values to and :mod:`.openapi` publishes.
"""
