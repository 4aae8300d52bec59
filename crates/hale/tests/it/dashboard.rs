//! The live dashboard in headless Chromium against a real three-agent
//! cluster (each agent a control-plane server and a candidate for role `db`,
//! as in the failover tests). The page is polled with deadlines; screenshots
//! go to `target/test-artifacts/dashboard/`.

use std::time::Duration;

use nix::sys::signal::Signal;

use crate::browser::{artifacts, Browser};
use crate::failover::first_holder;
use crate::support::Cluster;

/// Every member row the page shows, as `[name, state]` (a JS expression).
const ROWS: &str = "[...document.querySelectorAll('#members-list [data-member]')]
    .filter(r => !r.hidden).map(r => [r.dataset.member, r.dataset.state])";

/// Role `db` as the page shows it: `[holder, epoch, [candidates in order]]`
/// (a JS expression).
const DB: &str = "(() => { const r = document.querySelector('#roles [data-role=\"db\"]');
    return r && [r.dataset.holder, Number(r.dataset.epoch),
      [...r.querySelectorAll('[data-candidate]')].map(c => c.dataset.candidate)]; })()";

/// The state the page shows member `name` in (a JS expression).
fn state_js(name: &str) -> String {
    format!(
        "(() => {{ const r = document.querySelector('#members-list [data-member=\"{name}\"]');
         return r && !r.hidden && r.dataset.state; }})()"
    )
}

/// Opens agent `i`'s dashboard and waits for members and roles to render.
fn open(c: &Cluster, i: usize) -> Browser {
    let b = Browser::start();
    b.goto(&format!("http://{}/", c.agents[i].http));
    b.wait_js(
        Duration::from_secs(10),
        "the first full render",
        "return window.__haleRendered != null;",
    );
    b
}

#[test]
fn the_dashboard_shows_members_roles_and_services_and_a_killed_node_turning_dead_with_its_evidence()
{
    let c = Cluster::roles("dash-dead", "");
    let (holder, epoch) = first_holder(&c);
    let b = open(&c, 1);
    b.wait_js(
        Duration::from_secs(15),
        "three members alive",
        &format!(
            "const rows = {ROWS};
             return rows.length === 3 && rows.every(r => r[1] === 'alive') && rows;"
        ),
    );
    let db = b.wait_js(
        Duration::from_secs(15),
        "role db with its holder and standbys in order",
        &format!("const db = {DB}; return db && db[0] === '{holder}' && db[2].length === 3 && db;"),
    );
    assert_eq!(db[1], epoch, "the page shows the fencing epoch");
    assert_eq!(
        db[2],
        serde_json::json!(["n0", "n1", "n2"]),
        "holder first, then standbys by priority"
    );
    b.wait_js(
        Duration::from_secs(15),
        "service pg of every node, essential",
        "const s = [...document.querySelectorAll('#services [data-service=\"pg\"]')];
         return s.length === 3 && s.every(e => e.textContent.includes('essential'));",
    );
    b.screenshot(&artifacts(), "cluster");

    // Kill a standby: its row turns dead, and its verdict opens the evidence.
    c.signal(2, Signal::SIGKILL);
    b.wait_js(
        Duration::from_secs(15),
        "n2 dead",
        &format!("return {} === 'dead';", state_js("n2")),
    );
    b.eval("document.querySelector('#members-list [data-member=\"n2\"]').click(); return true;");
    let evidence = b.wait_js(
        Duration::from_secs(5),
        "the evidence behind n2's death",
        "const e = document.querySelector('#member-detail [data-evidence=\"n2\"]'); return e && e.textContent;",
    );
    let text = evidence.as_str().unwrap_or_default();
    assert!(text.contains("declared by"), "{text}");
    assert!(text.contains("confirmations"), "{text}");
    b.wait_js(
        Duration::from_secs(5),
        "the death on the timeline and the detection chart",
        "return !!document.querySelector('#events-list [data-kind=\"dead\"]')
            && !!document.querySelector('#chart circle.dot-det');",
    );
    b.screenshot(&artifacts(), "member-dead");
}

#[test]
fn the_dashboard_shows_the_failover_when_the_holder_is_killed_and_a_banner_while_its_agent_is_frozen(
) {
    let mut c = Cluster::roles("dash-failover", "");
    let (holder, epoch) = first_holder(&c);
    let h = c.index(&holder);
    let watcher = (h + 1) % 3;
    let b = open(&c, watcher);
    b.wait_js(
        Duration::from_secs(15),
        "the holder on the roles panel",
        &format!("const db = {DB}; return db && db[0] === '{holder}';"),
    );
    c.agents[h].kill();
    let db = b.wait_js(
        Duration::from_secs(30),
        "a new holder with a higher epoch",
        &format!(
            "const db = {DB}; return db && db[0] && db[0] !== '{holder}' && db[1] > {epoch} && db;"
        ),
    );
    assert_eq!(db[0], "n1", "the next-best candidate takes over: {db}");
    b.wait_js(
        Duration::from_secs(10),
        "the failover on the timeline",
        &format!(
            "return [...document.querySelectorAll('#events-list [data-kind=\"holder\"], \
             #events-list [data-kind=\"failover\"]')].some((r) => r.textContent.includes('{holder} → n1'));"
        ),
    );
    b.wait_js(
        Duration::from_secs(15),
        "the old holder dead",
        &format!("return {} === 'dead';", state_js(&holder)),
    );
    b.wait_js(
        Duration::from_secs(10),
        "the failover's duration on the chart",
        "return !!document.querySelector('#chart circle.dot-fo');",
    );
    b.screenshot(&artifacts(), "failover");

    // The page's own agent freezes: a banner says so and the data is marked stale.
    c.signal(watcher, Signal::SIGSTOP);
    b.wait_js(
        Duration::from_secs(15),
        "the unreachable banner",
        "return !document.getElementById('banner').hidden && document.body.classList.contains('stale');",
    );
    b.screenshot(&artifacts(), "unreachable");
    c.signal(watcher, Signal::SIGCONT);
    b.wait_js(
        Duration::from_secs(20),
        "the banner gone once the agent answers again",
        "return document.getElementById('banner').hidden && document.getElementById('conn').dataset.conn === 'live';",
    );
}

#[test]
fn hostile_strings_from_a_peer_are_shown_as_text_and_never_run() {
    const META: &str =
        "<img src=x onerror=\"window.__xss=1\"> ' \" &amp; <script>window.__xss=2</script>";
    let service = "<img src=x onerror=window.__xss=3>\"'";
    let long_arg = format!("<script>window.__xss=4</script>{}", "x".repeat(4000));
    let c = Cluster::roles_with(
        "dash-hostile",
        3,
        |_, _| None,
        |_| String::new(),
        |dir| {
            let p = dir.join("n2.toml");
            let cfg = std::fs::read_to_string(&p).unwrap().replacen(
                "[agent]\n",
                &format!("[agent]\nmeta = {META:?}\n"),
                1,
            ) + &format!(
                "\n[[service]]\nname = {service:?}\n[[service.check]]\n\
                 command = [\"sh\", \"-c\", \"exit 0\", {long_arg:?}]\ninterval = \"1s\"\n"
            );
            std::fs::write(&p, cfg).unwrap();
        },
    );
    first_holder(&c);
    let b = open(&c, 0);
    // The hostile service of n2 is listed, its name as plain text.
    let text = b.wait_js(
        Duration::from_secs(20),
        "n2's hostile service in the services panel",
        "const s = document.querySelector('#services');
         return s && s.textContent.includes('onerror=window.__xss=3') && s.textContent;",
    );
    assert!(text.as_str().unwrap().contains(service), "{text}");
    // Its metadata, in the member's detail, as plain text.
    b.eval("document.querySelector('#members-list [data-member=\"n2\"]').click(); return true;");
    let detail = b.wait_js(
        Duration::from_secs(10),
        "n2's detail with its metadata",
        "const d = document.querySelector('#member-detail');
         return d && d.textContent.includes('__xss=2') && d.textContent;",
    );
    assert!(detail.as_str().unwrap().contains("<script>"), "{detail}");
    // Nothing ran, and no element came from those strings.
    let ran = b.eval(
        "return [window.__xss ?? null,
                 document.querySelectorAll('#services img, #member-detail img, \
                   #services script, #member-detail script, #roles img').length];",
    );
    assert_eq!(
        ran,
        serde_json::json!([null, 0]),
        "a peer's string became HTML"
    );
    b.screenshot(&artifacts(), "hostile-peer");
}
