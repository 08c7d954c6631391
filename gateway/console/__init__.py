"""The operator's web console at /console: page shells served by the gateway, a client of /v1 in the browser.

Each page is a server-rendered shell (templates/) whose ES module (static/pages/) fetches the public /v1 JSON
with the user's key from the tab's sessionStorage, sent as `Authorization: Bearer` and never as a cookie: the
console can do nothing a script with the same key cannot. Its assets, uPlot for charts and the Swagger UI and
ReDoc bundles behind /docs and /redoc, are vendored under static/vendor/ with their versions and licences:
no CDN, no build step.
"""
