{
  "variables": {
    "with_verbs%": "<!(sh scripts/detect-verbs.sh)"
  },
  "targets": [
    {
      "target_name": "rdma_kv",
      "sources": [
        "native/binding/addon.cc",
        "native/binding/transport_binding.cc",
        "native/binding/kv_binding.cc",
        "native/binding/layout_binding.cc",
        "native/binding/notice_binding.cc",
        "native/kv/access.cc",
        "native/kv/atomics.cc",
        "native/kv/buffer_pool.cc",
        "native/kv/client_core.cc",
        "native/kv/crc32c.cc",
        "native/kv/get.cc",
        "native/kv/large.cc",
        "native/kv/location_cache.cc",
        "native/kv/posting.cc",
        "native/kv/replicated.cc",
        "native/kv/submit.cc",
        "native/kv/write.cc",
        "native/server/notice_drain.cc",
        "native/transport/memory.cc",
        "native/transport/provider.cc",
        "native/transport/shm/shm_provider.cc",
        "native/transport/shm/shm_queues.cc",
        "native/transport/shm/shm_wire.cc"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-fno-rtti", "-std=gnu++17"],
      "cflags": ["-fvisibility=hidden", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter"],
      "cflags_cc": ["-std=c++17", "-fexceptions", "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror",
                    "-Wno-unused-parameter", "-Wno-missing-field-initializers", "-O2"],
      "libraries": ["-lpthread"],
      "conditions": [
        ["with_verbs==1", {
          "sources": [
            "native/transport/verbs/verbs_provider.cc",
            "native/transport/verbs/verbs_connection.cc",
            "native/transport/verbs/verbs_cq.cc",
            "native/transport/verbs/verbs_device.cc",
            "native/transport/verbs/verbs_util.cc"
          ],
          "defines": ["RKV_WITH_VERBS=1"],
          "libraries": ["-libverbs", "-lrdmacm"]
        }]
      ]
    }
  ]
}
