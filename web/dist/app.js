// built by web/build.mjs
