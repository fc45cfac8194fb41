// Several hosts on one machine, for MPI jobs that cross a network as jobs on
// separate machines do: a network namespace per host, each with its own
// address on a bridge in the root namespace (only addresses and names this
// object makes: a /24 of 10.0.0.0/8 and names from this process's id), and
// an rsh agent that starts Open MPI's daemons inside a host's namespace
// under a hostname of its own. mpirun runs in the root namespace with the
// launcher's usual flags (a hostfile, the rsh agent, the interfaces to use)
// and TCP as the only transport between processes.
//
// Making namespaces needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN); without
// it `why_not` says what failed and the tests skip.
#pragma once

#include <unistd.h>

#include <fmt/core.h>

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
  NetnsHosts(int count, int slots, const std::filesystem::path& dir) : dir_(dir) {
    const int pid = static_cast<int>(::getpid());
    tag_ = fmt::format("{}", pid % 1000000);
    subnet_ = fmt::format("10.{}.{}", 100 + pid % 100, (pid / 100) % 250);
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
    hostfile.close();
    // Open MPI calls the agent as `agent [-x] host command...`.
    const std::filesystem::path agent = dir_ / "netns-agent.sh";
    std::ofstream(agent) << "#!/bin/sh\nhost=$1; shift\n[ \"$1\" = -x ] && shift\n"
                            "exec ip netns exec \"$host\" unshare --uts sh -c "
                            "\"hostname $host && $*\"\n";
    std::filesystem::permissions(agent, std::filesystem::perms::owner_all);
    made_ = true;
  }

  ~NetnsHosts() {
    for (const std::string& host : hosts_) Run("ip netns del " + host);
    Run("ip link del " + bridge_);
  }

  bool made() const { return made_; }
  const std::string& why_not() const { return why_not_; }
  std::string Name(int i) const { return fmt::format("sth{}-{}", tag_, i); }
  std::string Address(int i) const { return fmt::format("{}.{}", subnet_, 10 + i); }
  std::string Subnet() const { return subnet_ + ".0/24"; }

  // mpirun across the hosts, `np` processes, TCP only, on the hosts'
  // subnet (the root namespace's end of it is the bridge); a job that has
  // not ended in `seconds` is killed.
  std::string Mpirun(const std::string& mpiexec, int np, int seconds = 120) const {
    return fmt::format(
        "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout {} {} --hostfile {} "
        "-np {} "
        "--bind-to none --mca plm_rsh_agent {} --mca plm_rsh_no_tree_spawn 1 "
        "--mca oob_tcp_if_include {} --mca btl tcp,self --mca btl_tcp_if_include {}",
        seconds, mpiexec, (dir_ / "hosts").string(), np, (dir_ / "netns-agent.sh").string(),
        Subnet(), Subnet());
  }

 private:
  bool Run(const std::string& command) {
    const std::string log = (dir_ / "netns-setup.log").string();
    if (std::system((command + " >> " + log + " 2>&1").c_str()) == 0) return true;
    std::ifstream in(log);
    why_not_ = "cannot make network namespaces here (" + command +
               "): " + std::string(std::istreambuf_iterator<char>(in), {});
    return false;
  }

  std::filesystem::path dir_;
  std::string tag_, subnet_, bridge_, why_not_;
  std::vector<std::string> hosts_;
  bool made_ = false;
};

}  // namespace strata::testing
