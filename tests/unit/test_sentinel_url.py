"""Any text in the Sentinel URL form is read or refused with a ConfigError that says the
form, and no credential in it is ever shown (no server needed: nothing connects)."""

from __future__ import annotations

import asyncio
import os

from hypothesis import example, given, settings
from hypothesis import strategies as st

from timer import ConfigError
from timer.redis import connections
from timer.redis.redaction import redact_url
from timer.redis.store import RedisSettings

SECRET = "S3CRETpw"
EXAMPLES = int(os.environ.get("TICKWHEEL_FUZZ_EXAMPLES", "200"))

hosts = st.one_of(
    st.sampled_from(["127.0.0.1", "sentinel-a", "[::1]", "::1", "", "h", "[::1"]),
    st.text(max_size=12),
)
ports = st.one_of(
    st.sampled_from(["26379", "0", "99999", "", "x", "²", "٣", "1" * 30]), st.text(max_size=6)
)


@st.composite
def sentinel_urls(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["redis+sentinel", "rediss+sentinel"]))
    n = draw(st.integers(min_value=1, max_value=3))
    netloc = ",".join(f"{draw(hosts)}:{draw(ports)}" for _ in range(n))
    auth = draw(st.sampled_from([f"u:{SECRET}@", f"{SECRET}@", f":{SECRET}@", ""]))
    path = draw(
        st.one_of(
            st.sampled_from(["/mymaster", "/mymaster/0", "/", "", "/m/x", "/m/1/2", "/%41/٣"]),
            st.text(max_size=10).map(lambda t: "/" + t),
        )
    )
    query = draw(st.sampled_from([
        "", f"?sentinel_password={SECRET}", f"?password={SECRET}", f"?bogus=1&password={SECRET}",
        f"?sentinel_username=s&sentinel_password={SECRET}&socket_timeout=x",
        f"?ssl_password={SECRET}", "?socket_timeout=2", "?health_check_interval=5",
        "?socket_connect_timeout=1&db=2",
    ]))  # fmt: skip
    return f"{scheme}://{auth}{netloc}{path}{query}"


@settings(max_examples=EXAMPLES, deadline=None)
@given(url=sentinel_urls())
@example(url=f"redis+sentinel://{SECRET}@127.0.0.1:@/m")  # an @ inside the userinfo (found)
@example(url="redis+sentinel://h:²/m")  # a digit int() refuses (found)
@example(url="redis+sentinel://h:1/m?socket_timeout=2")  # an option given twice (found)
def test_any_sentinel_url_is_read_or_refused_without_its_secret(url: str) -> None:
    try:
        rs = RedisSettings.from_url(url)
    except ConfigError as exc:
        assert SECRET not in str(exc), str(exc)
        return
    target = rs.sentinel
    assert target is not None
    assert target.sentinels and all(0 < port < 65536 for _, port in target.sentinels)
    assert target.service
    for shown in (rs.safe_url, repr(rs), repr(target)):
        assert SECRET not in shown, shown
    # a client of it can be made (nothing connects until a command is sent)
    connections.client(rs).close()
    aio = connections.async_client(rs)
    asyncio.run(aio.aclose())


def test_an_at_sign_inside_the_userinfo_hides_all_of_it() -> None:
    """The last @ ends the userinfo; what stands before it is all credential, whatever
    other @ and : it holds (found by the test above, for every scheme)."""
    for url in (f"redis://{SECRET}@127.0.0.1:@h:1/0", f"rediss://u:{SECRET}@x@h:1/0"):
        assert SECRET not in redact_url(url), redact_url(url)
