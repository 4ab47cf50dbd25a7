"""The registry of concerns (module_utils/ncclprep/concerns, handed to the playbooks by
playbooks/vars/concerns.yml) agrees with roles/, and it is the only list of them; intent.yml
files read no live state."""

from __future__ import annotations

import glob
import os
import re
import subprocess

import pytest
import yaml
from ansible.module_utils.ncclprep import concerns

import ncclprep

REPO = ncclprep.REPO_ROOT
# Roles that are not concerns: the membership every concern reads, the preflight that
# checks them, a task helper the roles share, and ncclprep tune's steps.
NOT_CONCERNS = {"data_plane": "the cluster membership and data-plane interface every concern reads",
                "preflight": "validate.yml's role: loops over the registry",
                "boot_unit": "shared task helper (the boot-time unit of rps_rfs, numa_pinning, roce_qos)",
                "tune": "ncclprep tune's variables and steps (tune.yml): applies concerns' roles, is none"}
FIELDS = {"name", "switch", "data_plane", "facts", "reader"}
# What an intent.yml may do: compute from variables and facts already read. No module
# that reads the node (command, stat, slurp, find, getent, a custom facts module ...).
PURE = {"ansible.builtin.set_fact", "ansible.builtin.assert", "ansible.builtin.debug",
        "ansible.builtin.import_tasks", "ansible.builtin.include_tasks"}
TASK_KEYS = {"name", "vars", "when", "tags", "loop", "loop_control", "run_once", "register", "no_log",
             "changed_when", "failed_when", "check_mode", "delegate_to", "become", "block", "rescue", "always"}


def load(path: str):
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


CONCERNS = concerns.rows()
NAMES = [c["name"] for c in CONCERNS]


def role_dirs() -> list[str]:
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(REPO, "roles", "*"))
                  if os.path.isdir(os.path.join(p, "tasks")))


def test_every_entry_has_exactly_the_registry_fields_and_unique_names():
    for c in CONCERNS:
        assert set(c) == FIELDS, c
        assert isinstance(c["data_plane"], bool) and isinstance(c["facts"], bool), c
    assert len(set(NAMES)) == len(NAMES)


def test_the_playbooks_take_the_registry_from_the_lookup():
    """playbooks/vars/concerns.yml lists no concern: it asks lookup_plugins/ncclprep_concerns.py,
    which gives concerns.rows()."""
    assert load(os.path.join(REPO, "playbooks", "vars", "concerns.yml")) == {
        "ncclprep_concerns": "{{ query('ncclprep_concerns') }}"}
    from conftest import load_source
    lookup = load_source("ncclprep_concerns_lookup", "lookup_plugins/ncclprep_concerns.py")
    assert lookup.LookupModule().run([]) == CONCERNS


def test_every_role_is_a_concern_or_named_as_not_one():
    assert sorted(set(role_dirs()) - set(NOT_CONCERNS)) == sorted(NAMES)
    assert set(NOT_CONCERNS) <= set(role_dirs())


@pytest.mark.parametrize("concern", CONCERNS, ids=NAMES)
def test_each_concern_role_has_its_files(concern):
    role = os.path.join(REPO, "roles", concern["name"])
    for rel in ("tasks/main.yml", "tasks/validate.yml", "tasks/intent.yml", "meta/argument_specs.yml",
                "defaults/main.yml"):
        assert os.path.isfile(os.path.join(role, rel)), f"{concern['name']}: {rel} missing"
    assert os.path.isfile(os.path.join(role, "tasks", "facts.yml")) == concern["facts"], \
        f"{concern['name']}: facts: {concern['facts']} but tasks/facts.yml " \
        f"{'missing' if concern['facts'] else 'exists'}"


@pytest.mark.parametrize("concern", [c for c in CONCERNS if c["switch"]], ids=lambda c: c["name"])
def test_a_switch_is_a_documented_boolean_of_its_role(concern):
    """On by default, but slurm_health: it changes slurm.conf, only where Slurm runs (issue 25)."""
    role = os.path.join(REPO, "roles", concern["name"])
    assert load(os.path.join(role, "defaults", "main.yml"))[concern["switch"]] is (concern["name"] not in OFF)
    spec = load(os.path.join(role, "meta", "argument_specs.yml"))["argument_specs"]["main"]["options"]
    assert spec[concern["switch"]]["type"] == "bool"


#: Concerns off by default, and why.
OFF = {"slurm_health": "it changes an existing Slurm's slurm.conf: on where the inventory says Slurm runs"}


def _tasks(items):
    for task in items or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key))


WITH_INTENT = [n for n, c in concerns.BY_NAME.items() if hasattr(c, "intent")]
#: The membership every concern may compute from (roles/data_plane), beside its own variables.
MEMBERSHIP = {"data_plane", "data_plane_members", "data_plane_cidr"}


@pytest.mark.parametrize("concern", WITH_INTENT)
def test_an_intent_is_its_modules_function_of_declared_inputs(concern):
    """Issue 24, item 5, by construction: the role's intent.yml is one task that asks the lookup for
    the module's ``intent``, which gets the variables of INTENT_VARS and the facts of INTENT_FACTS
    only (concerns.intent_inputs). Each of INTENT_VARS is a variable of a concern's role (its
    defaults), the membership or the intent of a concern before it in the registry; never a fact."""
    tasks = load(os.path.join(REPO, "roles", concern, "tasks", "intent.yml"))
    assert [{k: v for k, v in t.items() if k != "name"} for t in tasks] == [
        {"ansible.builtin.set_fact": {f"{concern}_intent": f"{{{{ query('ncclprep_intent', '{concern}') | first }}}}"}}]
    module = concerns.BY_NAME[concern]
    role_vars = set()
    for role in NAMES:
        role_vars |= set(load(os.path.join(REPO, "roles", role, "defaults", "main.yml")) or {})
    earlier = {f"{n}_intent" for n in NAMES[:NAMES.index(concern)]}
    assert [v for v in module.INTENT_VARS if v not in role_vars | MEMBERSHIP | earlier] == []
    assert all(isinstance(k, str) and k.partition(":")[2] in ("", "keys") for k in module.INTENT_FACTS)


@pytest.mark.parametrize("concern", [n for n in WITH_INTENT if concerns.BY_NAME[n].INTENT_FACTS])
def test_an_intent_sees_only_its_declared_facts(concern):
    """Whatever else the concern's facts hold (its live state, what it sets), intent_inputs hands
    over the keys of INTENT_FACTS only, a ``:keys`` entry as the sorted names alone."""
    module = concerns.BY_NAME[concern]
    facts = {k.partition(":")[0]: {"b": {"live": 1}, "a": {"live": 2}} for k in module.INTENT_FACTS}
    facts["live_state"] = "what the concern sets"
    _, node = concerns.intent_inputs(concern, {}, facts)
    assert set(node) == {k.partition(":")[0] for k in module.INTENT_FACTS}
    for key in module.INTENT_FACTS:
        name, _, part = key.partition(":")
        assert node[name] == (["a", "b"] if part == "keys" else facts[name])


def test_every_concern_computes_its_intent_in_python():
    assert WITH_INTENT == NAMES


def test_no_second_place_lists_the_concerns():
    """Outside the registry, no playbook, task file or script names three or more concerns
    (a list of roles); role READMEs, Molecule scenarios and tests may mention them."""
    files = subprocess.run(["git", "ls-files", "playbooks", "roles", "site.yml", "validate.yml", "scripts",
                            "src", "library", "filter_plugins", "module_utils", ".config"],
                           cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    offenders = {}
    for rel in files:
        if rel == "module_utils/ncclprep/concerns/__init__.py" or rel.endswith(".md") or "/molecule/" in rel:
            continue
        path = os.path.join(REPO, rel)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        named = [n for n in NAMES if re.search(rf"(?<![\w/]){n}(?![\w])", text) and
                 re.search(rf"\b(role|name):\s*{n}\b|^\s*-\s*{n}\s*$|[\[,]\s*{n}\s*[\],]", text, re.M)]
        if len(named) >= 3:
            offenders[rel] = named
    assert offenders == {}


def test_every_concern_with_facts_has_a_reader():
    with_facts = {c["name"] for c in CONCERNS if c["facts"]}
    # roce_qos reads its own state with roce_qos.survey (its module, and node.read_node)
    assert {c["name"] for c in CONCERNS if c["reader"]} == with_facts - {"roce_qos"}


@pytest.mark.parametrize("concern", sorted(c["name"] for c in CONCERNS if c["reader"]))
def test_a_concern_is_read_with_its_reader_so_validate_reads_all_in_one_run(concern):
    """Issue 24, item 2: validate.yml reads every concern of a node in one concern_facts run from
    the roles' ``<role>_reader`` options. A facts.yml that read with options of its own, or
    without skipping its run under ncclprep_read_together, would add a module run per node."""
    role_vars = load(os.path.join(REPO, "roles", concern, "vars", "main.yml")) or {}
    assert isinstance(role_vars.get(f"{concern}_reader"), dict), f"{concern}: no {concern}_reader in vars/main.yml"
    facts = load(os.path.join(REPO, "roles", concern, "tasks", "facts.yml"))
    reads = [t for t in _tasks(facts) if "concern_facts" in t]
    assert [(t["concern_facts"].get("concerns"), t.get("when")) for t in reads] == [
        ({concern: f"{{{{ {concern}_reader }}}}"}, "not ncclprep_read_together | default(false)")]


def _uses_data_plane(role: str) -> bool:
    """The role's tasks or templates, or its intent (INTENT_VARS), read the data plane or the members."""
    if set(getattr(concerns.BY_NAME.get(role), "INTENT_VARS", ())) & MEMBERSHIP:
        return True
    pattern = re.compile(r"\bdata_plane(\.|_members\b|_cidr\b)")
    for path in glob.glob(os.path.join(REPO, "roles", role, "tasks", "*.yml")) + \
            glob.glob(os.path.join(REPO, "roles", role, "templates", "*")):
        with open(path, encoding="utf-8") as fh:
            if pattern.search(fh.read()):
                return True
    return False


@pytest.mark.parametrize("concern", CONCERNS, ids=NAMES)
def test_a_role_that_reads_the_data_plane_or_the_members_depends_on_data_plane(concern):
    meta = load(os.path.join(REPO, "roles", concern["name"], "meta", "main.yml"))
    deps = [d if isinstance(d, str) else d.get("role") for d in meta.get("dependencies") or []]
    assert _uses_data_plane(concern["name"]) == ("data_plane" in deps), \
        f"{concern['name']}: uses data_plane: {_uses_data_plane(concern['name'])}, meta dependencies: {deps}"
    if concern["data_plane"]:
        assert "data_plane" in deps


def _imports(path: str) -> list[str]:
    """The files a task file imports or includes, in order (``import_tasks: facts.yml``)."""
    out = []
    for task in _tasks(load(path)):
        for key in ("ansible.builtin.import_tasks", "ansible.builtin.include_tasks"):
            if key in task:
                value = task[key]
                out.append(value if isinstance(value, str) else value.get("file"))
    return out


@pytest.mark.parametrize("concern", [c for c in CONCERNS if c["facts"]], ids=lambda c: c["name"])
def test_validate_reads_the_facts_before_it_computes_the_intent(concern):
    order = _imports(os.path.join(REPO, "roles", concern["name"], "tasks", "validate.yml"))
    assert "facts.yml" in order and "intent.yml" in order, f"{concern['name']}: validate.yml imports {order}"
    assert order.index("facts.yml") < order.index("intent.yml"), f"{concern['name']}: validate.yml imports {order}"


@pytest.mark.parametrize("concern", [c for c in CONCERNS if c["facts"]], ids=lambda c: c["name"])
def test_facts_tasks_say_how_they_run_in_check_mode(concern):
    """A facts read runs for real under --check (check_mode: false), or, for a module that
    plans (roce_qos), in check mode always (check_mode: true); never left to the run's mode."""
    path = os.path.join(REPO, "roles", concern["name"], "tasks", "facts.yml")
    for task in _tasks(load(path)):
        modules = [k for k in task if k not in TASK_KEYS]
        if modules and set(modules) <= PURE:
            continue
        assert isinstance(task.get("check_mode"), bool), f"{path}: task {task.get('name')!r} has no check_mode"


@pytest.mark.parametrize("concern", CONCERNS, ids=NAMES)
def test_every_role_variable_facts_and_intent_read_has_a_default(concern):
    """A role's facts.yml and intent.yml also run from the preflight (include_role tasks_from),
    where only the role's defaults and vars/main.yml stand behind its variables; the reader
    options in vars/main.yml (``<role>_reader``, what facts.yml reads with) are held to the
    defaults the same way."""
    role = os.path.join(REPO, "roles", concern["name"])
    role_vars = load(os.path.join(role, "vars", "main.yml")) if os.path.isfile(
        os.path.join(role, "vars", "main.yml")) else {}
    defaults = set(load(os.path.join(role, "defaults", "main.yml")) or {}) | set(role_vars or {})
    own = re.compile(rf"\b({concern['name']}_[a-z0-9_]+)\b")
    reader = yaml.safe_dump((role_vars or {}).get(f"{concern['name']}_reader") or {})
    for rel in ("facts.yml", "intent.yml"):
        path = os.path.join(role, "tasks", rel)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as fh:
            text = "\n".join(line for line in fh if not line.lstrip().startswith("#"))
        if rel == "facts.yml":
            text += "\n" + reader
        used = set(own.findall(text)) - {f"{concern['name']}_intent"}
        # facts and intent the role itself sets (set_fact keys) are outputs, not inputs
        for task in _tasks(load(path)):
            used -= set((task.get("ansible.builtin.set_fact") or {}).keys())
        assert sorted(used - defaults) == [], f"{path}: no default in {concern['name']}/defaults/main.yml"


def test_the_intent_lookup_computes_several_concerns_in_order_each_seeing_the_ones_before():
    """Every intent of a node in one task: ``query('ncclprep_intent', 'sysctl_tuning', 'rps_rfs')``
    gives both intents, rps_rfs's flow count
    split from the rps_sock_flow_entries of the sysctl_tuning intent computed in the same call (no
    sysctl_tuning_intent among the variables), and the same intents one concern at a time."""
    from ansible.errors import AnsibleLookupError
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    from conftest import load_source

    lookup = load_source("ncclprep_intent_lookup", "lookup_plugins/ncclprep_intent.py").LookupModule(
        loader=DataLoader(), templar=Templar(loader=DataLoader()))
    facts = {"rps_rfs": {"interface": "eth0", "queues": {"rx-0": {}, "rx-1": {}}, "local_cpus": "0-3",
                         "online_cpus": "0-7", "possible_cpus": "0-7"}}
    variables = {"inventory_hostname": "node9", "ansible_facts": {"ncclprep": facts},
                 "sysctl_tuning_settings": {"net.core.rps_sock_flow_entries": 8192, "net.core.somaxconn": 4096},
                 "sysctl_tuning_overrides": {}, "rps_rfs_cpus": None, "rps_rfs_flow_cnt": None}
    sysctl, rps = lookup.run(["sysctl_tuning", "rps_rfs"], variables)
    assert sysctl["net.core.rps_sock_flow_entries"] == 8192
    assert rps == {"interface": "eth0", "queues": ["rx-0", "rx-1"], "cpus": "0-3", "mask": "0f", "flow_cnt": 4096}
    assert lookup.run(["rps_rfs"], dict(variables, sysctl_tuning_intent=sysctl)) == [rps]
    # without it, rps_rfs alone takes the kernel's table: the intents above did feed one another
    assert lookup.run(["rps_rfs"], variables)[0]["flow_cnt"] == 32768 // 2
    with pytest.raises(AnsibleLookupError, match=r"node9: ncclprep_intent takes concerns with an intent, got "
                                                 r"\['rps_rfs', 'nope'\] \(\['nope'\] not among them\)"):
        lookup.run(["rps_rfs", "nope"], variables)
