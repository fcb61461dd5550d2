"""Why a daemon did not answer: the Python peer of libdevplace's client/connect_diagnosis.cc. After
gRPC reports UNAVAILABLE (its text says "Socket closed" for most TLS mistakes), the target is dialled
once more with the standard library's socket and ssl to name the cause and the setting that fixes
it: a host name that does not resolve, a client key that does not belong to the client certificate,
devplaced not running (no socket, a stale socket, connection refused), a socket whose mode, group
or directory does not let this user connect, plaintext sent to a TLS
listener, TLS sent to a plaintext one, a daemon certificate from an unknown CA or without the dialled
name, a required client certificate missing, or a client certificate the daemon refused.
:func:`diagnose_unreachable` is what _grpc_connection.py calls (tests/python/test_tls.py and
test_errors.py check its sentences).
"""

from __future__ import annotations

import grp
import ipaddress
import os
import socket
import ssl
from typing import Dict, Optional, Tuple

_ROOT_START_HINT = ("devplaced is probably not running: start it with `sudo systemctl start devplaced` (the package's "
                   "unit) or run `devplaced`")
_USER_START_HINT = ("devplaced is not answering there (it is stopped, or restarting as a package upgrade does): try "
                    "again in a moment, or ask the host's operator to check it")


def _start_hint() -> str:
    """What to do about a daemon that does not answer: root may start it; an ordinary user cannot,
    and is told who can (libdevplace's StartHint)."""
    return _ROOT_START_HINT if os.geteuid() == 0 else _USER_START_HINT
_CERT_FIX = ("pass --tls_cert and --tls_key (DEVPLACE_TLS_CERT, DEVPLACE_TLS_KEY; TlsOptions cert/key): a client "
             "certificate issued by the CA in the daemon's --tls_client_ca")
# HTTP/2's client preface and an empty SETTINGS frame: a gRPC server answers with its SETTINGS.
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def no_answer(target: str, waited: float, root: Optional[bool] = None) -> str:
    """One sentence for a call to ``target`` that got no answer within ``waited`` seconds (its deadline
    passed: gRPC's bare "Deadline Exceeded"): what may be wrong and what to do (libdevplace's NoAnswer,
    in Python's terms). ``root`` (by default whether this process runs as root): root is told to check
    the daemon with systemctl and its journal; any other user, who usually may not read that journal,
    to ask the host's operator."""
    if root is None:
        root = os.geteuid() == 0
    check = ("check it (`systemctl status devplaced` and `journalctl -u devplaced` where it runs as the package's "
             "unit, else the log of whatever started it)" if root else "ask the host's operator to check it")
    return (f"devplaced at {target} did not answer within {waited:g}s: the daemon is not answering (stopped, hung "
            f"or overloaded) or its host cannot be reached; {check}, check that it is the daemon meant "
            "(address=, DEVPLACE_ADDRESS), or allow more time (timeout=, in seconds; None waits without one)")


def permission_fix(fix: str) -> str:
    """``fix`` (what the host's operator can change so that this user may connect to a unix socket),
    then what works meanwhile; for _unix and _target.check_unix_socket (libdevplace's PermissionFix)."""
    return (f"{fix}; meanwhile --address=127.0.0.1:7465 (DEVPLACE_ADDRESS) reaches the daemon over loopback TCP "
            "where it listens there, as by default (a pick there needs --ttl)")


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except (KeyError, OverflowError):
        return str(gid)


def _unix(path: str) -> str:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return f"no socket at {path}: {_start_hint()}"
    except OSError:  # PermissionError: check_unix_socket (_target.py) said why before any call
        return ""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    except ConnectionRefusedError:
        return f"{path} is a socket nobody accepts on (left behind by a devplaced that stopped): {_start_hint()}"
    except PermissionError:
        group = _group_name(st.st_gid)
        return (f"permission denied: the socket {path} (mode {st.st_mode & 0o7777:04o}, owner uid {st.st_uid}, group "
                f"{group}) does not let this user (uid {os.geteuid()}) connect; " +
                permission_fix(
                    # Group root: nobody should be added to it; a group of the socket's own is the fix.
                    ("the host's operator runs devplaced with --socket_group=GROUP (a group for devplace's users; "
                     "the socket's group is root now) and adds the user to GROUP" if st.st_gid == 0 else
                     f"the host's operator adds the user to group {group}") +
                    " (effective at the next login) or runs devplaced with --socket_mode=0666, its default"))
    except OSError:
        return ""
    finally:
        s.close()
    return ""


def _split(target: str) -> Optional[Tuple[str, str]]:
    for prefix in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        if target.startswith(prefix):
            target = target[len(prefix):]
            break
    host, sep, port = target.rpartition(":")
    if not sep or not port or not host:
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, port


# getaddrinfo's answers for a name that does not resolve (EAI_NODATA is glibc's).
_UNRESOLVED = {getattr(socket, name) for name in ("EAI_NONAME", "EAI_NODATA", "EAI_AGAIN", "EAI_FAIL")
               if hasattr(socket, name)}


def _dial(host: str, port: str, timeout: float) -> Tuple[Optional[socket.socket], str]:
    where = f"{host}:{port}"
    try:
        s = socket.create_connection((host, int(port)), timeout=timeout)
    except socket.gaierror as e:
        if e.errno not in _UNRESOLVED:
            return None, ""
        advice = ("the name server did not answer; try again, or " if e.errno == socket.EAI_AGAIN
                  else "check the name, or ")
        return None, (f"the host name {host} does not resolve ({e.strerror}): {advice}dial the daemon's IP address "
                      "(--address, DEVPLACE_ADDRESS)")
    except ConnectionRefusedError:
        return None, (f"nothing listens on {where} (connection refused): {_start_hint()}, or it listens elsewhere "
                      "(its --listen)")
    except socket.timeout:
        return None, f"{where} accepted no connection within {int(timeout * 1000)} ms (a firewall, or the wrong host?)"
    except (OSError, ValueError):
        return None, ""
    return s, ""


def _context(tls: Dict[str, str], verify: bool) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
    if verify:
        if tls.get("ca"):
            ctx.load_verify_locations(tls["ca"])
        else:
            ctx.load_default_certs()
    if tls.get("cert"):
        ctx.load_cert_chain(tls["cert"], tls["key"])
    ctx.set_alpn_protocols(["h2"])  # gRPC servers insist on ALPN h2
    return ctx


def _names(cert: dict) -> str:
    names = [f"{'IP' if kind == 'IP Address' else kind}:{value.strip()}"
             for kind, value in cert.get("subjectAltName", ()) if kind in ("DNS", "IP Address")]
    return ", ".join(names) or "no subject alternative names"


def _key_pair(settings: Dict[str, str]) -> str:
    """The sentence saying that the client key does not belong to the client certificate, or "" when
    they go together (or cannot be read: the client reported that before dialling)."""
    if not settings.get("cert") or not settings.get("key"):
        return ""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(settings["cert"], settings["key"])
    except ssl.SSLError as e:
        if e.reason != "KEY_VALUES_MISMATCH":
            return ""
        return (f"the private key --tls_key={settings['key']} does not belong to the client certificate "
                f"--tls_cert={settings['cert']}: pass the key that was made with that certificate "
                "(DEVPLACE_TLS_CERT, DEVPLACE_TLS_KEY)")
    except (OSError, ValueError):
        return ""
    return ""


def _tls(host: str, port: str, tls: Optional[Dict[str, str]], timeout: float) -> str:
    where = f"{host}:{port}"
    settings = tls or {}
    mismatch = _key_pair(settings)
    if mismatch:
        return mismatch
    sni = settings.get("server_name") or host
    # 1. Does the port speak TLS, and does the daemon take this client (its certificate, or none)?
    # A gRPC daemon that accepts answers HTTP/2's preface with its SETTINGS; one that refuses the
    # client's certificate (TLS 1.3 settles it after the handshake) closes the connection.
    s, why = _dial(host, port, timeout)
    if s is None:
        return why
    handshake = accepted = False
    alert = ""
    try:
        with _context(settings, verify=False).wrap_socket(s, server_hostname=sni) as conn:
            handshake = True
            try:
                conn.sendall(_PREFACE)
                accepted = bool(conn.recv(64))
            except ssl.SSLError as e:
                alert = str(e.reason or "")
            except OSError:
                pass
    except ssl.SSLError as e:
        alert = str(e.reason or "")
    except OSError:
        pass
    finally:
        s.close()
    if tls is None:
        if not handshake and "ALERT" not in alert:
            return ""  # not a TLS listener either
        return (f"{where} is a TLS listener (devplaced --listen=tls:...) and this client spoke plaintext: pass "
                "--tls_ca (DEVPLACE_TLS_CA; TlsOptions ca), the CA that signed the daemon's certificate" +
                ("" if accepted else f"; the daemon also wants a client certificate: {_CERT_FIX}"))
    if not handshake and "ALERT" not in alert:
        return (f"{where} did not answer the TLS handshake: it is probably a plaintext listener; dial the daemon's "
                "tls: listener, or leave out --tls_ca/--tls_cert (and DEVPLACE_TLS_*) for this one")
    # 2. Is the daemon's certificate from the CA given, and does it carry the name dialled?
    s, why = _dial(host, port, timeout)
    if s is None:
        return why
    try:
        with _context(settings, verify=True).wrap_socket(s, server_hostname=sni) as conn:
            cert = conn.getpeercert() or {}
        if not _matches(cert, sni):
            return (f"the daemon's certificate names {_names(cert)}, not {sni}: dial one of those names, or pass "
                    "--tls_server_name=NAME (DEVPLACE_TLS_SERVER_NAME; TlsOptions server_name) with a name it carries")
    except ssl.SSLCertVerificationError as e:
        given = (f" with --tls_ca={settings['ca']}; pass the CA that signed it (DEVPLACE_TLS_CA)" if settings.get("ca")
                 else "; pass --tls_ca (DEVPLACE_TLS_CA), the CA that signed it")
        return f"the daemon's certificate is not trusted: {e.verify_message}{given}"
    except (ssl.SSLError, OSError):
        pass
    finally:
        s.close()
    # 3. The client certificate, as the first connection saw it.
    if accepted:
        return ""
    if not settings.get("cert"):
        return f"the daemon at {where} requires a client certificate (mutual TLS) and none was given: {_CERT_FIX}"
    told = f", TLS alert: {alert.lower()}" if alert else ""
    return (f"the daemon at {where} refused the client certificate --tls_cert={settings['cert']}{told}; use one "
            "issued by the CA in the daemon's --tls_client_ca")


def _matches(cert: dict, name: str) -> bool:
    """Whether `cert` (getpeercert()) carries `name`: an IP address SAN, or a DNS SAN (one leading *.)."""
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        ip = None
    for kind, value in cert.get("subjectAltName", ()):
        if ip is not None and kind == "IP Address":
            try:
                if ipaddress.ip_address(value.strip()) == ip:
                    return True
            except ValueError:
                continue
        elif ip is None and kind == "DNS":
            pattern, host = value.lower(), name.lower()
            if pattern == host or (pattern.startswith("*.") and host.partition(".")[2] == pattern[2:]):
                return True
    return False


def diagnose_unreachable(target: str, tls: Optional[Dict[str, str]], timeout: Optional[float]) -> str:
    """One sentence naming why ``target`` did not answer and what fixes it, or "" when no cause is found.

    ``tls`` is None for a plaintext channel, else its settings after the DEVPLACE_TLS_* fill (keys
    ca, cert, key, server_name)."""
    wait = min(timeout, 3.0) if timeout else 3.0
    if target.startswith("unix:"):
        path = target[len("unix:"):]
        return _unix(path[2:] if path.startswith("//") else path)
    if target.startswith("unix-abstract:"):
        return ""
    split = _split(target)
    if split is None:
        return ""
    return _tls(split[0], split[1], tls, wait)
