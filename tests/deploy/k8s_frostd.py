"""The k8s test's frostd part: frostd on each rendered role config, its paths mapped through the pod's
volume mounts onto temp dirs, a replica following the trainer, probes, the HPA metric and SIGTERM.
"""

from k8s_common import *  # noqa: F401,F403

sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "testing"))
import frostd_fixture  # noqa: E402  (the start-up the served tests share)


# ------------------------------------------------------------------------------------------------
# frostd on the rendered configs.

class _NoPorts(Exception):
    pass


class Frostd(frostd_fixture.FrostdProcess):
    """frostd on a rendered config, started at once (spawn) in `cwd`."""

    def __init__(self, binary, cfg_path, args, cwd, tmp, name, http=False):
        # Free loopback ports, not the config's fixed ones (tests run side by side). The HTTP API only where
        # the config turns it on (http=True: the replicas), moved the same way; off, it stays off.
        self.http = http
        # Tokens come from the mapped token files only.
        env = {k: v for k, v in os.environ.items() if k not in ("FROST_ADMIN_TOKEN", "FROST_USER_TOKEN")}
        super().__init__(tmp, name, ["--config", cfg_path, "--listen", "127.0.0.1:0", "--metrics-listen",
                                     "127.0.0.1:0"] + (["--http-listen", "127.0.0.1:0"] if http else []) + args,
                         env=env, cwd=cwd, binary=binary,
                         required_ports=("grpc", "metrics") + (("http",) if http else ()))
        self.spawn()

    def output(self):
        return self.log()

    def wait_ports(self, timeout):
        """True once the port file names every port; False when frostd exits first or it does not come in time
        (the caller reports it with output())."""
        def fail(why):
            raise _NoPorts(why)

        try:
            super().wait_ports(timeout, fail)
        except _NoPorts:
            return False
        return True

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['metrics']}/metrics", timeout=5) as r:
            return r.read().decode()

    def http_get(self, path, token=None):
        """(status, body) of GET path on the OpenAI HTTP API; token: sent as Authorization: Bearer."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.ports['http']}{path}",
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def health(self, frostctl, service):
        """True when the gRPC health service answers SERVING for `service` (the kubelet's gRPC probe)."""
        r = subprocess.run([frostctl, "health", "--addr", f"127.0.0.1:{self.ports['grpc']}", "--service", service,
                            "--timeout", "3"], capture_output=True, text=True, timeout=20)
        return r.returncode == 0

    def wait_ready(self, frostctl, timeout):
        end = time.time() + timeout
        while time.time() < end:
            if self.proc.poll() is not None:
                return False
            try:
                ready = re.search(r"^frost_ready(\{[^}]*\})? 1(\.0+)?$", self.metrics(), re.M) is not None
            except OSError:
                ready = False
            if ready and (not frostctl or self.health(frostctl, READINESS_SERVICE)):
                return True
            time.sleep(0.25)
        return False


def map_paths(role, vol_dirs):
    """The role's config and args with every container path mapped onto the temp dir that stands for
    the volume mounted there (vol_dirs: (kind, object name without hash) -> dir). A path no mount holds
    maps to None: on a read-only root filesystem frostd could not use it."""
    def host(path):
        if not path or not os.path.isabs(path):
            return path
        m = mount_for(role.container, path)
        if not m:
            return None
        v = volume(role.workload, m["name"])
        key = (("Secret", strip_hash(v["secret"]["secretName"])) if "secret" in v else
               ("PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"]) if "persistentVolumeClaim" in v else
               ("emptyDir", role.name + m["name"]) if "emptyDir" in v else None)
        if key is None or key not in vol_dirs:
            return None
        return os.path.join(vol_dirs[key], os.path.relpath(path, m["mountPath"]))

    cfg = copy.deepcopy(role.config)
    unmapped = []
    for section, key in (("jobs", "state_dir"), ("jobs", "data_root"), ("artifacts", "follow_state_dir"),
                         ("auth", "admin_token_file"), ("auth", "user_token_file"), ("model", "path"),
                         ("engine", "kv_repair"), ("engine", "kv_splice")):
        val = cfg.get(section, {}).get(key)
        if val:
            h = host(val)
            if h is None:
                unmapped.append(f"{section}.{key}={val}")
            cfg[section][key] = h
    args = []
    model = arg_value(role.args, "--model")
    if model:
        h = host(model)
        if h is None:
            unmapped.append(f"--model {model}")
        args += ["--model", h or model]
    for flag in role.args[2:]:
        if flag not in ("--model", model):
            unmapped.append(f"unexpected arg {flag}")
    return cfg, args, unmapped


def run_frostd_checks(c, renders, binary, frostctl, tmp):
    """Returns True when the follower check ran, False when it was skipped (frostd lacks the keys)."""
    follower_supported = True
    seen = set()
    for label, roles in renders:
        inf, trn = roles["inference"], roles["trainer"]
        key = (inf.config_text, trn.config_text, tuple(inf.args), tuple(trn.args))
        if key in seen:
            print(f"[frostd] {label}: same configs and args as a render already run")
            continue
        seen.add(key)
        print(f"[frostd] {label}")
        run_dir = tempfile.mkdtemp(prefix=f"{label}-", dir=tmp)
        # Volumes: the shared state claim (one dir for both roles), the Secret, the models claim.
        vol_dirs = {}
        state = os.path.join(run_dir, "vol-frost-state")
        os.makedirs(state)
        vol_dirs[("PersistentVolumeClaim", "frost-state")] = state
        tokens = os.path.join(run_dir, "vol-frost-tokens")
        os.makedirs(tokens)
        with open(os.path.join(tokens, "admin-token"), "w") as f:
            f.write(ADMIN_TOKEN + "\n")
        with open(os.path.join(tokens, "user-token"), "w") as f:
            f.write(USER_TOKEN + "\n")
        vol_dirs[("Secret", "frost-tokens")] = tokens
        # A models volume holds the checkpoint at its root: the repo's default model stands in.
        vol_dirs[("PersistentVolumeClaim", "frost-models")] = os.path.join(SOURCE_DIR, "models", "stories260K")
        procs = []
        try:
            # The replica first, on a volume the trainer has not touched yet: on a first install every pod
            # starts at once, and a replica must not need the trainer's store to exist.
            for role in (inf, trn):
                cfg, args, unmapped = map_paths(role, vol_dirs)
                if not c.check(not unmapped, f"{label} {role.name}: every path in the config lies on a mounted volume",
                               str(unmapped)):
                    continue
                cfg_path = os.path.join(run_dir, f"{role.name}.yaml")
                with open(cfg_path, "w") as f:
                    yaml.safe_dump(cfg, f, sort_keys=False)
                # cwd = the repo: a relative model.path (the default) resolves as in the image's working dir.
                p = Frostd(binary, cfg_path, args, SOURCE_DIR, run_dir, role.name, http=role.http_port is not None)
                procs.append((role, p))
                if not p.wait_ports(60) or not p.wait_ready(frostctl, 120):
                    out = p.output()
                    p.stop(10)
                    if role is inf and re.search(r"unknown key '?artifacts", out):
                        follower_supported = False
                        print("\n" + "!" * 100)
                        print(f"!! SKIP: this frostd does not know the config key `{FOLLOW_KEY}` (nor the `artifacts:` "
                              "section):\n!! the inference replicas' config cannot run until the follower mode lands.\n"
                              f"!! frostd said: {out.strip().splitlines()[-1] if out.strip() else '(nothing)'}")
                        print("!" * 100 + "\n")
                        continue
                    c.fail(f"{label} {role.name}: frostd serves and turns ready on the rendered config",
                           f"{' '.join(p.cmd)}\n{out[-3000:]}")
                    continue
                c.check(True, f"{label} {role.name}: frostd starts on the rendered config and turns ready")
                if frostctl:
                    c.check(p.health(frostctl, ""), f"{label} {role.name}: liveness probe (service \"\") SERVING")
                    c.check(p.health(frostctl, READINESS_SERVICE),
                            f"{label} {role.name}: readiness probe ({READINESS_SERVICE}) SERVING")
                if role.http_port is not None:
                    # What the Service frost's port http reaches: the OpenAI API, behind the Secret's user token.
                    status, body = p.http_get("/v1/models", USER_TOKEN)
                    c.check(status == 200 and '"data"' in body,
                            f"{label} {role.name}: the OpenAI HTTP API answers GET /v1/models with the user token",
                            f"{status} {body[:300]}")
                    status, body = p.http_get("/v1/models")
                    c.check(status == 401, f"{label} {role.name}: the OpenAI HTTP API refuses a request without a "
                            "token (auth.require_for_inference)", f"{status} {body[:300]}")
                else:
                    c.check("http" not in p.ports, f"{label} {role.name}: serves no HTTP API", str(p.ports))
                metrics = p.metrics()
                for name in roles["hpa_metrics"]:
                    c.check(re.search(rf"^{re.escape(name)}(\{{[^}}]*\}})? ", metrics, re.M) is not None,
                            f"{label} {role.name}: /metrics exports the HPA's metric {name}")
                if role is inf:
                    c.check(not os.listdir(state), f"{label} replica: wrote nothing to the (empty) state volume",
                            str(os.listdir(state)))
                else:
                    c.check(os.path.isdir(os.path.join(cfg["jobs"]["state_dir"], "artifacts")),
                            f"{label} trainer: created its state directory and artifact store on the state volume "
                            f"(the directory the replica follows), beside the running replica")
            for role, p in reversed(procs):
                if p.proc.poll() is not None:
                    continue
                drain = role.effective["server"]["drain_timeout_s"]
                rc = p.stop(drain + 15)
                c.check(rc == 0, f"{label} {role.name}: SIGTERM stops frostd with exit 0", f"rc {rc}\n{p.output()[-2000:]}")
        finally:
            for _, p in procs:
                if p.proc.poll() is None:
                    p.proc.kill()
                    p.proc.wait()

    # The base's placeholder tokens: frostd must refuse them (an unconfigured deployment fails loudly).
    label, roles = renders[0]
    trn = roles["trainer"]
    run_dir = tempfile.mkdtemp(prefix="placeholder-", dir=tmp)
    tokens = os.path.join(run_dir, "vol-frost-tokens")
    os.makedirs(tokens)
    sec = roles["secret"]
    for k, v in sec.get("data", {}).items():
        with open(os.path.join(tokens, k), "wb") as f:
            f.write(base64.b64decode(v))
    state = os.path.join(run_dir, "vol-frost-state")
    os.makedirs(state)
    cfg, args, _ = map_paths(trn, {("Secret", "frost-tokens"): tokens, ("PersistentVolumeClaim", "frost-state"): state})
    cfg_path = os.path.join(run_dir, "trainer.yaml")
    with open(cfg_path, "w") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)
    p = Frostd(binary, cfg_path, args, SOURCE_DIR, run_dir, "placeholder")
    try:
        rc = p.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        rc = None
    out = p.output()
    p.stop(5)
    c.check(rc not in (None, 0) and "is empty" in out, f"{label}: frostd refuses the base's placeholder tokens",
            f"rc {rc}\n{out[-1500:]}")
    return follower_supported
