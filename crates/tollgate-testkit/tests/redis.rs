//! The spawners against real `redis-server` processes: they start, answer, survive the fault
//! helpers, and leave nothing behind (no listening port, no unreaped child).
//!
//! Server, cluster and sentinel tests share this one binary so that they run in parallel.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use tollgate_testkit::{RedisCluster, RedisSentinel, RedisServer};

fn assert_refused(addr: SocketAddr) {
    let err = TcpStream::connect(addr).expect_err("nothing should listen on a stopped server's port");
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{addr}: {err}");
}

/// A child that was waited for has no process entry left; an unreaped one stays as a zombie.
fn assert_reaped(pid: u32) {
    if cfg!(target_os = "linux") {
        let entry = format!("/proc/{pid}");
        let status = std::fs::read_to_string(format!("{entry}/status")).unwrap_or_default();
        assert!(
            !std::path::Path::new(&entry).exists(),
            "redis-server {pid} still has a process entry:\n{status}"
        );
    }
}

#[test]
fn server_answers_ping_and_is_gone_after_drop() {
    let redis = RedisServer::start();
    assert_eq!(redis.cli(&["PING"]), "PONG");
    assert_eq!(redis.url(), format!("redis://127.0.0.1:{}/", redis.port()));
    assert_eq!(redis.addr().port(), redis.port());
    let (addr, pid, dir) = (
        redis.addr(),
        redis.pid().expect("running"),
        redis.dir().to_owned(),
    );
    assert!(dir.is_dir());

    drop(redis);

    assert_refused(addr);
    assert_reaped(pid);
    assert!(
        !dir.exists(),
        "the temporary directory {} should be removed",
        dir.display()
    );
}

#[test]
fn kill_then_restart_serves_on_the_same_port() {
    let mut redis = RedisServer::start();
    redis.cli(&["SET", "k", "v"]);
    let (port, old_pid) = (redis.port(), redis.pid().expect("running"));

    redis.kill();
    assert_eq!(redis.pid(), None);
    assert_refused(redis.addr());
    assert_reaped(old_pid);
    redis.kill(); // a second kill is a no-op

    redis.restart();
    assert_eq!(redis.port(), port);
    assert_ne!(redis.pid(), Some(old_pid));
    assert_eq!(redis.cli(&["PING"]), "PONG");
    assert_eq!(
        redis.cli(&["EXISTS", "k"]),
        "0",
        "persistence is off: a restart starts empty"
    );
}

#[test]
fn restart_replaces_a_running_server() {
    let mut redis = RedisServer::start();
    let old_pid = redis.pid().expect("running");
    redis.restart();
    assert_reaped(old_pid);
    assert_eq!(redis.cli(&["PING"]), "PONG");
}

#[test]
fn restart_waits_for_its_port_to_be_released() {
    let mut redis = RedisServer::start();
    redis.kill();
    // Someone else holds the port for a moment; the server must come back once they let go.
    let squatter = TcpListener::bind(redis.addr()).expect("the killed server's port is free");
    let release = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        drop(squatter);
    });
    let started = Instant::now();
    redis.restart();
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(redis.cli(&["PING"]), "PONG");
    release.join().expect("release thread");
}

#[test]
fn two_servers_run_side_by_side() {
    let a = RedisServer::start();
    let b = RedisServer::start();
    assert_ne!(a.port(), b.port());
    assert_ne!(a.dir(), b.dir());
    a.cli(&["SET", "who", "a"]);
    b.cli(&["SET", "who", "b"]);
    assert_eq!(a.cli(&["GET", "who"]), "a");
    assert_eq!(b.cli(&["GET", "who"]), "b");
}

#[test]
fn pause_holds_commands_until_it_ends() {
    let redis = RedisServer::start();
    let started = Instant::now();
    redis.pause(Duration::from_millis(300));
    assert_eq!(redis.cli(&["PING"]), "PONG");
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "PING answered during the pause"
    );
}

#[test]
fn script_flush_forgets_loaded_scripts() {
    let redis = RedisServer::start();
    let sha = redis.cli(&["SCRIPT", "LOAD", "return 1"]);
    assert_eq!(redis.cli(&["SCRIPT", "EXISTS", &sha]), "1");
    redis.script_flush();
    assert_eq!(redis.cli(&["SCRIPT", "EXISTS", &sha]), "0");
}

#[test]
fn bad_arguments_fail_with_the_servers_complaint() {
    let err = RedisServer::try_start_with_args(&["--maxmemory-policy", "sometimes"]).unwrap_err();
    assert!(err.to_string().contains("sometimes"), "{err}");
}

#[test]
#[should_panic(expected = "redis-cli -h 127.0.0.1")]
fn cli_panics_when_the_server_is_down() {
    let mut redis = RedisServer::start();
    redis.kill();
    redis.cli(&["PING"]);
}

#[test]
fn cluster_starts_reshards_recovers_a_node_and_stops_cleanly() {
    let mut cluster = RedisCluster::start();
    let ports = cluster.ports();
    assert_eq!(ports.len(), 3);
    assert_eq!(
        cluster.urls(),
        ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}/"))
            .collect::<Vec<_>>()
    );
    for node in cluster.nodes() {
        let info = node.cli(&["CLUSTER", "INFO"]);
        assert!(
            info.lines().any(|l| l.trim_end() == "cluster_state:ok"),
            "{}: {info}",
            node.port()
        );
        assert!(
            info.lines().any(|l| l.trim_end() == "cluster_known_nodes:3"),
            "{}: {info}",
            node.port()
        );
    }
    assert_eq!(cluster.slot_owner(0), ports[0]);
    assert_eq!(cluster.slot_owner(16383), ports[2]);

    let (from, to) = cluster.reshard(100);
    assert_eq!((from, to), (ports[0], ports[1]));
    assert_eq!(cluster.slot_owner(0), to);
    assert_eq!(cluster.slot_owner(99), to);
    assert_eq!(cluster.slot_owner(100), from);
    for node in cluster.nodes() {
        assert!(
            node.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"),
            "{}",
            node.port()
        );
    }

    // Every node has its own script cache.
    let shas: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|n| n.cli(&["SCRIPT", "LOAD", "return 1"]))
        .collect();
    cluster.script_flush_all();
    for (node, sha) in cluster.nodes().iter().zip(&shas) {
        assert_eq!(node.cli(&["SCRIPT", "EXISTS", sha]), "0", "{}", node.port());
    }

    // A crashed node comes back with its identity and slots (its nodes.conf is kept).
    let node = &mut cluster.nodes_mut()[2];
    let id = node.cli(&["CLUSTER", "MYID"]);
    node.kill();
    node.restart();
    assert_eq!(node.cli(&["CLUSTER", "MYID"]), id);
    cluster.wait_until_ok();
    assert_eq!(cluster.slot_owner(16383), ports[2]);

    let nodes: Vec<(SocketAddr, u32)> = cluster
        .nodes()
        .iter()
        .map(|n| (n.addr(), n.pid().expect("running")))
        .collect();
    drop(cluster);
    for (addr, pid) in nodes {
        assert_refused(addr);
        assert_reaped(pid);
    }
}

/// Polls `node`'s key count until it is `keys`, for at most 10 s.
fn wait_for_key_count(node: &RedisServer, keys: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while node.cli(&["DBSIZE"]) != keys {
        assert!(
            Instant::now() < deadline,
            "redis at port {} never held {keys} keys",
            node.port()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_replica_cut_from_its_master_is_promoted_without_the_writes_it_missed() {
    let mut cluster = RedisCluster::start_with_replicas();
    assert_eq!(cluster.nodes().len(), 6);
    let slot: u16 = cluster.nodes()[0]
        .cli(&["CLUSTER", "KEYSLOT", "{k}"])
        .parse()
        .expect("a slot");
    let master_port = cluster.slot_owner(slot);
    let master = cluster
        .nodes()
        .iter()
        .find(|n| n.port() == master_port)
        .expect("the master");
    let replica = cluster
        .replica_of(master_port)
        .expect("every master has a replica");
    let replica_port = replica.port();
    assert!(replica.cli(&["INFO", "replication"]).contains("role:slave"));

    master.cli(&["SET", "{k}replicated", "1"]);
    wait_for_key_count(replica, "1");
    replica.cut_from_master();
    master.cli(&["SET", "{k}lost", "1"]);
    assert_eq!(master.cli(&["DBSIZE"]), "2");
    // The link stays down: the replica's reconnections (one a second) fail.
    thread::sleep(Duration::from_millis(1_500));
    assert_eq!(replica.cli(&["DBSIZE"]), "1");
    let master_pid = master.pid().expect("running");
    let master_addr = master.addr();

    let failover = cluster.fail_over(slot);
    assert_eq!(failover.old_master, master_port);
    assert_eq!(failover.new_master, replica_port);
    assert_eq!(cluster.slot_owner(slot), replica_port);
    assert_refused(master_addr);
    assert_reaped(master_pid);
    let promoted = cluster
        .nodes()
        .iter()
        .find(|n| n.port() == replica_port)
        .expect("the replica");
    assert!(promoted.cli(&["INFO", "replication"]).contains("role:master"));
    assert_eq!(promoted.cli(&["GET", "{k}replicated"]), "1");
    assert_eq!(
        promoted.cli(&["EXISTS", "{k}lost"]),
        "0",
        "a write it never received"
    );
    // The promoted master has no replica of its own; the others keep theirs.
    assert!(cluster.replica_of(replica_port).is_none());
    for node in cluster.nodes().iter().filter(|n| n.pid().is_some()) {
        assert!(node.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"));
    }
}

#[test]
fn spawners_can_be_shared_across_threads() {
    // Fault tests move a cluster into a blocking task to reshard it while traffic runs.
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<RedisServer>();
    assert_send_sync::<RedisCluster>();
    assert_send_sync::<RedisSentinel>();
}

#[test]
fn sentinels_promote_the_replica_of_a_killed_master_and_everything_stops_on_drop() {
    let mut setup = RedisSentinel::start();
    let [first, second] = [setup.servers()[0].port(), setup.servers()[1].port()];
    assert_eq!(setup.master().port(), first);
    assert_eq!(setup.replica().map(RedisServer::port), Some(second));
    assert_eq!(
        setup.store_url(),
        format!("redis+sentinel://{}/tollgate-master", setup.sentinel_addrs())
    );
    for sentinel in setup.sentinels() {
        assert_eq!(
            sentinel.cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", setup.master_name()]),
            format!("127.0.0.1\n{first}")
        );
    }
    setup.master().cli(&["SET", "replicated", "1"]);
    setup.wait_until_replicated();
    let replica = setup.replica().expect("a replica");
    replica.cut_from_master();
    setup.master().cli(&["SET", "lost", "1"]);
    let master_pid = setup.master().pid().expect("running");
    let master_addr = setup.master().addr();

    let failover = setup.fail_over();
    assert_eq!((failover.old_master, failover.new_master), (first, second));
    assert_refused(master_addr);
    assert_reaped(master_pid);
    let promoted = setup.master();
    assert_eq!(promoted.port(), second);
    assert_eq!(promoted.cli(&["GET", "replicated"]), "1");
    assert_eq!(
        promoted.cli(&["EXISTS", "lost"]),
        "0",
        "a write it never received"
    );
    assert!(setup.replica().is_none());

    let pids: Vec<u32> = setup
        .sentinels()
        .iter()
        .chain(setup.servers())
        .filter_map(RedisServer::pid)
        .collect();
    let addrs: Vec<SocketAddr> = setup.sentinels().iter().map(RedisServer::addr).collect();
    assert_eq!(pids.len(), 4, "three sentinels and the promoted replica");
    drop(setup);
    for pid in pids {
        assert_reaped(pid);
    }
    for addr in addrs {
        assert_refused(addr);
    }
}
