//! The replicated lease table's rules.

use hale_control::{LeaseRejection, LeaseRequest, LeaseResponse, LeaseTable};

fn grant(holder: &str, epoch: u64) -> LeaseRequest {
    LeaseRequest::Grant {
        role: "db".into(),
        holder: holder.into(),
        epoch,
    }
}

#[test]
fn grants_must_carry_the_next_epoch() {
    let mut t = LeaseTable::default();
    assert_eq!(t.apply(&grant("a", 1)), LeaseResponse::Granted { epoch: 1 });
    assert_eq!(
        t.apply(&grant("b", 1)),
        LeaseResponse::Rejected(LeaseRejection::NotNextEpoch {
            got: 1,
            expected: 2
        })
    );
    assert_eq!(t.role("db").unwrap().holder.as_deref(), Some("a"));
    assert_eq!(t.apply(&grant("b", 2)), LeaseResponse::Granted { epoch: 2 });
}

#[test]
fn only_the_holder_at_its_epoch_renews_or_releases() {
    let mut t = LeaseTable::default();
    t.apply(&grant("a", 1));
    let renew = |h: &str, e| LeaseRequest::Renew {
        role: "db".into(),
        holder: h.into(),
        epoch: e,
    };
    assert_eq!(t.apply(&renew("a", 1)), LeaseResponse::Renewed { epoch: 1 });
    assert!(matches!(
        t.apply(&renew("b", 1)),
        LeaseResponse::Rejected(_)
    ));
    t.apply(&grant("b", 2));
    assert!(
        matches!(t.apply(&renew("a", 1)), LeaseResponse::Rejected(_)),
        "a fenced holder cannot renew"
    );
    let release = LeaseRequest::Release {
        role: "db".into(),
        holder: "b".into(),
        epoch: 2,
        next: None,
    };
    assert_eq!(t.apply(&release), LeaseResponse::Released);
    assert_eq!(t.role("db").unwrap().holder, None);
    assert_eq!(
        t.role("db").unwrap().epoch,
        2,
        "the epoch survives a release"
    );
}
