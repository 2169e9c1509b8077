# bench/workloads.sh — sourced by the bench scripts: the config file of each
# workload name they accept.
#
#   config_of WORKLOAD    prints the config's path (relative to the project root);
#                         an unknown name is an error naming the calling script.

config_of() {
  case "$1" in
    charlstm) echo configs/charlstm-bench.yaml ;;
    convnet) echo configs/fashion_convnet.yaml ;;
    mlp | mlp-powersgd) echo configs/mlp-bench.yaml ;;
    alexnet) echo configs/cifar_alexnet.yaml ;;
    *) echo "$(basename "$0"): unknown workload '$1' (expected charlstm, convnet, mlp or alexnet)" >&2; exit 2 ;;
  esac
}
