import time
import pytest
from tests.conftest import example, start_worker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

def test_timing(alice, upload, build, tmp_path, live_server):
    t=time.monotonic()
    w = start_worker(tmp_path)
    print("worker start", time.monotonic()-t)
    try:
        t=time.monotonic()
        tk = upload(alice, example("library_lookup"))
        tk = build(tk)
        print("build", time.monotonic()-t, tk.current_revision.status, tk.current_revision.status_detail)
        print(tk.current_revision.tools)
        print(tk.current_revision.user_valves_schema)
    finally:
        w.kill()
        print(w.output()[-3000:])
