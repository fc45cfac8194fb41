// Several hosts on one machine, for MPI jobs that cross a network as jobs on
// separate machines do: a network namespace per host, each with its own
// address on a bridge in the root namespace (only addresses and names this
// object makes: a /24 of 10.0.0.0/8 and names from this process's id), and
// an rsh agent that starts Open MPI's daemons inside a host's namespace
// under a hostname of its own. mpirun runs on host 0 with the launcher's
// usual flags (a hostfile, the rsh agent, the interfaces to use) and TCP as
// the only transport between processes. Faults are made on a host: its link
// cut, its processes killed, its link slowed and lossy.
//
// Making namespaces needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN); without
// it `why_not` says what failed and the tests skip.
#pragma once

#include <unistd.h>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace strata::testing {

class NetnsHosts {
 public:
  // `count` hosts of `slots` processes each; files (the agent, the hostfile,
  // the setup's log) go in `dir`.
  NetnsHosts(int count, int slots, const std::filesystem::path& dir) : dir_(dir), slots_(slots) {
    // Names and a subnet of this object's own: the kernel frees a deleted
    // namespace (and its end of a veth pair) only once its last socket has
    // closed, which after a cut link takes minutes, so the next test of
    // this process must not reuse them.
    static int made_before = 0;
    const int pid = static_cast<int>(::getpid()), serial = made_before++ % 100;
    tag_ = fmt::format("{}x{}", pid % 100000, serial);
    subnet_ = fmt::format("10.{}.{}", 100 + pid % 100, ((pid / 100) * 7 + serial) % 250);
    bridge_ = "stb" + tag_;
    std::ofstream hostfile(dir_ / "hosts");
    if (!Run(fmt::format("ip link add {0} type bridge && ip addr add {1}.1/24 dev {0} && "
                         "ip link set {0} up",
                         bridge_, subnet_))) {
      return;
    }
    for (int i = 0; i < count; ++i) {
      const std::string host = Name(i), veth = fmt::format("stv{}_{}", tag_, i);
      hosts_.push_back(host);
      if (!Run(fmt::format("ip netns add {0} && ip link add {1} type veth peer name eth0 netns {0} "
                           "&& ip link set {1} master {2} up && "
                           "ip netns exec {0} ip addr add {3} dev eth0 && "
                           "ip netns exec {0} ip link set eth0 up && "
                           "ip netns exec {0} ip link set lo up",
                           host, veth, bridge_, Address(i) + "/24"))) {
        return;
      }
      hostfile << host << " slots=" << slots << "\n";
    }
    // mpirun runs on host 0, as on a cluster's first node. There, a link to
    // a host that is cut is given up after 4 resends (about 6 s) instead of
    // Linux's 15 (about 15 minutes): mpirun, which waits for every daemon
    // to confirm the job's end, would otherwise wait that long for one it
    // cannot reach.
    if (!Run(fmt::format("ip netns exec {} sysctl -q -w net.ipv4.tcp_retries2=4", Name(0)))) {
      return;
    }
    hostfile.close();
    // Open MPI calls the agent as `agent [-x] host command...`.
    const std::filesystem::path agent = dir_ / "netns-agent.sh";
    std::ofstream(agent) << "#!/bin/sh\nhost=$1; shift\n[ \"$1\" = -x ] && shift\n"
                            "exec ip netns exec \"$host\" unshare --uts sh -c "
                            "\"hostname $host && $*\"\n";
    std::filesystem::permissions(agent, std::filesystem::perms::owner_all);
    made_ = true;
  }

  // Kills what still runs on the hosts (a daemon cut off from mpirun
  // waits minutes for it), then deletes them.
  ~NetnsHosts() {
    for (size_t i = 0; i < hosts_.size(); ++i) {
      KillHost(static_cast<int>(i));
      Run("ip netns del " + hosts_[i]);
    }
    Run("ip link del " + bridge_);
  }

  bool made() const { return made_; }
  const std::string& why_not() const { return why_not_; }
  std::string Name(int i) const { return fmt::format("sth{}-{}", tag_, i); }
  std::string Address(int i) const { return fmt::format("{}.{}", subnet_, 10 + i); }
  std::string Subnet() const { return subnet_ + ".0/24"; }

  // mpirun on host 0 across the hosts (all, or those in `on`), `np`
  // processes, TCP only, on the hosts' subnet; a job that has not ended in
  // `seconds` is killed. The launcher's
  // own links to its daemons send TCP keepalives after 3 s of quiet, so a
  // host cut off is dropped in seconds, not Open MPI's default 8 minutes.
  std::string Mpirun(const std::string& mpiexec, int np, int seconds = 120,
                     const std::vector<int>& on = {}) const {
    std::string hostfile = (dir_ / "hosts").string();
    if (!on.empty()) {
      hostfile += fmt::format("-{}", fmt::join(on, "-"));
      std::ofstream out(hostfile);
      for (int i : on) out << Name(i) << " slots=" << slots_ << "\n";
    }
    return fmt::format(
        "ip netns exec {} env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
        "timeout {} {} --hostfile {} "
        "-np {} --bind-to none --mca plm_rsh_agent {} --mca plm_rsh_no_tree_spawn 1 "
        "--mca oob_tcp_if_include {} --mca oob_tcp_keepalive_time 3 "
        "--mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3 "
        "--mca btl tcp,self --mca btl_tcp_if_include {}",
        Name(0), seconds, mpiexec, hostfile, np, (dir_ / "netns-agent.sh").string(), Subnet(),
        Subnet());
  }

  // Faults. The link between host `i` and the bridge goes down (as a cable
  // pulled or a switch port lost).
  bool CutLink(int i) { return Run(fmt::format("ip link set stv{}_{} down", tag_, i)); }
  // Every process of host `i` (the launcher's daemon and the job's
  // processes there) killed at once, as a machine that loses power.
  bool KillHost(int i) { return Run(fmt::format("ip netns pids {} | xargs -r kill -9", Name(i))); }
  // Host `i`'s link slowed to `mbit` Mbit/s and dropping `loss_percent` of
  // the TCP segments it sends (tbf and an nftables rule: this kernel has no
  // netem).
  bool SlowAndLossy(int i, int mbit, int loss_percent) {
    return Run(
        fmt::format("ip netns exec {0} tc qdisc add dev eth0 root tbf rate {1}mbit burst 32kbit "
                    "latency 400ms && ip netns exec {0} nft add table inet strata_loss && "
                    "ip netns exec {0} nft add chain inet strata_loss out "
                    "'{{ type filter hook output priority 0 ; }}' && "
                    "ip netns exec {0} nft add rule inet strata_loss out meta l4proto tcp "
                    "numgen random mod 100 '<' {2} drop",
                    Name(i), mbit, loss_percent));
  }

 private:
  bool Run(const std::string& command) {
    const std::string log = (dir_ / "netns-setup.log").string();
    if (std::system((command + " >> " + log + " 2>&1").c_str()) == 0) return true;
    std::ifstream in(log);
    why_not_ = "'" + command + "' failed: " + std::string(std::istreambuf_iterator<char>(in), {});
    return false;
  }

  std::filesystem::path dir_;
  int slots_;
  std::string tag_, subnet_, bridge_, why_not_;
  std::vector<std::string> hosts_;
  bool made_ = false;
};

}  // namespace strata::testing
