import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "toolhub.settings")
# The web server keeps its database connections in a pool (see TOOLHUB_DB_POOL in settings).
os.environ.setdefault("TOOLHUB_DB_POOL", "1")
application = get_wsgi_application()
