"""The web server's settings, read by gunicorn (``gunicorn -c python:console.gunicorn_conf
console.wsgi:application``, README "Deploy"), never by Django."""

# The access log names each request by its path alone (``%(U)s``): the request line
# (``%(r)s``) and the query string (``%(q)s``) carry idempotency keys, which hold user and
# business ids (``GET /api/v1/records?key=...``), and a look-up's token; the referrer
# (``%(f)s``) carries a console page's filters, keys among them. Otherwise gunicorn's default.
access_log_format = '%(h)s %(l)s %(u)s %(t)s "%(m)s %(U)s %(H)s" %(s)s %(b)s "%(a)s"'
