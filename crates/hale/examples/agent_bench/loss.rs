//! Random loss on loopback for `agent_bench idle --loss P`: an nftables
//! table of its own drops P% of the packets (UDP and TCP) arriving at the
//! agents' gossip ports, chosen by `numgen random`. The table is deleted
//! when the guard drops, also when the benchmark panics.

use std::process::Command;

/// The nftables table; deleted on drop.
pub struct Loss {
    table: String,
}

fn nft(script: &str) -> bool {
    Command::new("nft")
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(script.as_bytes())?;
            c.wait()
        })
        .is_ok_and(|s| s.success())
}

impl Loss {
    /// Drops `percent`% of the packets to `ports` on loopback from now on.
    pub fn install(percent: u32, ports: &[u16]) -> Loss {
        let table = format!("hale_bench_loss_{}", std::process::id());
        let set: Vec<String> = ports.iter().map(u16::to_string).collect();
        let set = set.join(", ");
        let script = format!(
            "table inet {table} {{\n\
               chain input {{\n\
                 type filter hook input priority -10; policy accept;\n\
                 iifname \"lo\" udp dport {{ {set} }} numgen random mod 100 < {percent} drop\n\
                 iifname \"lo\" tcp dport {{ {set} }} numgen random mod 100 < {percent} drop\n\
               }}\n\
             }}\n"
        );
        assert!(
            nft(&script),
            "could not install the loss rules (root and nft needed)"
        );
        Loss { table }
    }
}

impl Drop for Loss {
    fn drop(&mut self) {
        nft(&format!("delete table inet {}\n", self.table));
    }
}
