"""A FastAPI service that arms a job's timeout when the job starts and completes it when
the job reports done (#44). With ``pip install '.[fastapi,server]' uvicorn`` (the
fastapi extra leaves the ASGI server to you), your embedded server running
(``tickwheel server start``; or give another Redis in ``TICKWHEEL_REDIS_URL``) and its
namespace initialised (``tickwheel init``), from the checkout (README.md beside this
file has the whole run):

    uvicorn app:app --app-dir examples/fastapi --port 8002

and a worker (`tickwheel worker`) fires the timeouts nobody completed; a handler
(`tickwheel handle`) acts on them. tests/integration/test_fastapi.py runs it.
"""

from __future__ import annotations

import json
import os

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field

from timer.fastapi import TimerClientDep, answer_refusals, lifespan

app = FastAPI(lifespan=lifespan(namespace=os.environ.get("TICKWHEEL_NAMESPACE", "default")))
answer_refusals(app)  # a job id too long: 400 and why, not a 500


class Start(BaseModel):
    timeout_s: float = Field(30, gt=0, le=86_400, description="How long the job may run.")


def timer_id(job_id: str) -> str:
    return f"job:{{{job_id}}}"  # the job's hash tag: its timer and its done key on one shard


@app.post("/jobs/{job_id}")
async def start(job_id: str, body: Start, timers: TimerClientDep) -> dict[str, object]:
    """The job started: its timeout fires in timeout_s unless the job reports done."""
    t = await timers.schedule(
        timer_id(job_id), int(body.timeout_s * 1000), payload={"job": job_id},
        watch=[f"{timer_id(job_id)}:done"], rearm=True,
    )  # fmt: skip
    return {"job": job_id, "deadline_ms": t.deadline_ms, "created": t.created}


@app.post("/jobs/{job_id}/done")
async def done(job_id: str, timers: TimerClientDep) -> dict[str, object]:
    """The job finished: its timeout is completed (safe to repeat)."""
    completed = await timers.notify(f"{timer_id(job_id)}:done")
    return {"job": job_id, "completed": completed}


@app.get("/jobs/{job_id}")
async def state(job_id: str, timers: TimerClientDep) -> dict[str, object]:
    """Where the job's timeout stands: pending, completed, expired or cancelled."""
    info = await timers.get(timer_id(job_id))
    if info is None:
        raise HTTPException(404, f"no job {json.dumps(job_id)}")
    return {"job": job_id, "state": info.state, "deadline_ms": info.deadline_ms}
